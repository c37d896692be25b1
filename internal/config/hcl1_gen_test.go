package config

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Generated variations for the differential test: random CTS
// configurations written in the many spellings HCL 1 accepts (attribute
// order, blank lines, the three comment styles, heredocs, commas, one-line
// blocks, arguments after a closing brace, blocks as objects or lists of
// objects, unquoted labels).

// gNode is an argument (value set) or a block (items set).
type gNode struct {
	name   string
	labels []string
	value  any // string, int, bool, []string, map[string]string
	items  []gNode
	block  bool
}

func attr(name string, v any) gNode { return gNode{name: name, value: v} }

func blk(name string, labels []string, items ...gNode) gNode {
	return gNode{name: name, labels: labels, items: items, block: true}
}

type gen struct{ r *rand.Rand }

func (g gen) pick(ss ...string) string { return ss[g.r.IntN(len(ss))] }
func (g gen) maybe(p float64) bool     { return g.r.Float64() < p }

func (g gen) word() string {
	return g.pick("web", "api", "db", "cache", "lb-1", "svc_2", "a.b", "x y", `q"uote`, "tab\there", "back\\slash", "${not}")
}

func (g gen) dur() string { return g.pick("1s", "5s", "250ms", "1m", "1m30s", "2h") }

func (g gen) config() []gNode {
	var top []gNode
	if g.maybe(0.5) {
		top = append(top, attr("log_level", g.pick("info", "DEBUG", "warn", "ERR", "trace")))
	}
	if g.maybe(0.5) {
		top = append(top, attr("port", 1000+g.r.IntN(60000)))
	}
	if g.maybe(0.5) {
		top = append(top, attr("working_dir", g.pick("sync-tasks", "/var/lib/cts", "./tasks dir")))
	}
	if g.maybe(0.3) {
		top = append(top, attr("id", "cts-"+strconv.Itoa(g.r.IntN(9))))
	}
	if g.maybe(0.5) {
		top = append(top, g.buffer())
	}
	if g.maybe(0.7) {
		var c []gNode
		c = append(c, attr("address", g.pick("localhost:8500", "https://c:8501")))
		if g.maybe(0.4) {
			c = append(c, attr("token", g.word()))
		}
		if g.maybe(0.4) {
			c = append(c, blk("transport", nil, attr("dial_timeout", g.dur()), attr("max_idle_conns_per_host", g.r.IntN(500))))
		}
		if g.maybe(0.3) {
			c = append(c, blk("tls", nil, attr("verify", g.maybe(0.5)), attr("ca_cert", "/ca.pem")))
		}
		if g.maybe(0.3) {
			c = append(c, blk("service_registration", nil, attr("service_name", g.word()),
				blk("default_check", nil, attr("enabled", g.maybe(0.5)))))
		}
		top = append(top, blk("consul", nil, c...))
	}
	if g.maybe(0.5) {
		d := []gNode{attr("log", g.maybe(0.5))}
		if g.maybe(0.5) {
			d = append(d, blk("backend", []string{"consul"}, attr("gzip", g.maybe(0.5)), attr("path", "p/"+g.word())))
		}
		if g.maybe(0.5) {
			d = append(d, blk("required_providers", nil, blk("aws", nil, attr("source", "hashicorp/aws"), attr("version", "~> 5.0"))))
		}
		top = append(top, blk("driver", []string{"terraform"}, d...))
	}
	providers := []string{}
	for i := range g.r.IntN(3) {
		name := fmt.Sprintf("p%d", i)
		items := []gNode{attr("region", g.word()), attr("retries", g.r.IntN(5))}
		if g.maybe(0.4) {
			items = append(items, attr("task_env", map[string]string{"ENV_A": g.word()}))
		}
		if g.maybe(0.3) {
			items = append(items, blk("nested", nil, attr("k", g.word())))
		}
		providers = append(providers, name)
		top = append(top, blk("terraform_provider", []string{name}, items...))
	}
	for i := range 1 + g.r.IntN(3) {
		top = append(top, g.task(i, providers))
	}
	return top
}

func (g gen) buffer() gNode {
	var b []gNode
	if g.maybe(0.5) {
		b = append(b, attr("enabled", g.maybe(0.8)))
	}
	if g.maybe(0.5) {
		b = append(b, attr("min", g.pick("1s", "5s")))
	}
	if g.maybe(0.5) {
		b = append(b, attr("max", g.pick("30s", "1m")))
	}
	return blk("buffer_period", nil, b...)
}

func (g gen) task(i int, providers []string) gNode {
	items := []gNode{attr("name", fmt.Sprintf("task-%d", i)), attr("module", g.pick("./m", "org/m/aws"))}
	if g.maybe(0.5) {
		items = append(items, attr("description", g.word()+"\n"+g.word()))
	}
	if g.maybe(0.3) {
		items = append(items, attr("version", g.pick("1.0.0", "2.3.4")))
	}
	if len(providers) > 0 && g.maybe(0.5) {
		items = append(items, attr("providers", providers[:1]))
	}
	if g.maybe(0.3) {
		items = append(items, attr("enabled", g.maybe(0.5)))
	}
	if g.maybe(0.3) {
		items = append(items, g.buffer())
	}
	var cond gNode
	input := ""
	switch g.r.IntN(6) {
	case 0:
		sel := []gNode{attr("names", []string{g.word(), "web"})}
		if g.maybe(0.3) {
			sel = append(sel, attr("status", []string{"passing", g.pick("warning", "critical", "maintenance")}))
		}
		if g.maybe(0.3) {
			sel = append(sel, attr("peer", g.word()), attr("partition", g.word()))
		}
		if g.maybe(0.4) {
			sel = append(sel, attr("cts_user_defined_meta", map[string]string{"owner": g.word()}))
		}
		if g.maybe(0.4) {
			sel = append(sel, attr("filter", g.word()), attr("datacenter", "dc1"))
		}
		if g.maybe(0.4) {
			sel = append(sel, attr("use_as_module_input", g.maybe(0.5)))
		}
		cond, input = blk("condition", []string{"services"}, sel...), "consul-kv"
	case 1:
		cond, input = blk("condition", []string{"catalog-services"}, attr("regexp", g.pick("^web", ".*")),
			attr("node_meta", map[string]string{"rack": g.word()})), "services"
	case 2:
		cond, input = blk("condition", []string{"consul-kv"}, attr("path", "k/"+g.pick("a", "b")), attr("recurse", g.maybe(0.5))), "services"
	case 3:
		cond, input = blk("condition", []string{"schedule"}, attr("cron", g.pick("* * * * *", "0 */5 * * * * *"))), "services"
	case 4: // ctsync extension
		cond, input = blk("condition", []string{"nodes"}, attr("datacenter", "dc1"), attr("filter", g.word()),
			attr("node_meta", map[string]string{"rack": g.word()}), attr("use_as_module_input", g.maybe(0.5))), "services"
	default: // ctsync extension
		sides := []gNode{blk("source_services", nil, attr("regexp", g.pick("^web", "")))}
		if g.maybe(0.5) {
			sides = append(sides, blk("destination_services", nil, attr("names", []string{g.word(), "api"})))
		}
		cond, input = blk("condition", []string{"intentions"}, append(sides, attr("namespace", g.word()))...), "services"
	}
	items = append(items, cond)
	if g.maybe(0.4) {
		if input == "services" {
			items = append(items, blk("module_input", []string{"services"}, attr("regexp", "^db")))
		} else {
			items = append(items, blk("module_input", []string{"consul-kv"}, attr("path", "cfg"), attr("recurse", true)))
		}
	}
	return blk("task", nil, items...)
}

// ---- rendering ----

func (g gen) str(s string) string {
	// HCL 1 strings: escape quotes and backslashes; "${" needs no escape
	// but its braces must balance, so it stays plain text here.
	q := strconv.Quote(s)
	return q
}

func (g gen) value(v any, heredocOK bool) string {
	switch v := v.(type) {
	case string:
		if heredocOK && !strings.Contains(v, "EOT") && g.maybe(0.3) && !strings.HasSuffix(v, "\n") {
			// A heredoc's value ends with a newline; the description
			// generated holds "\n" in the middle only, so write the value
			// plus newline and let the comparison see HCL 1's reading.
			if g.maybe(0.5) {
				return "<<EOT\n" + v + "\nEOT\n"
			}
			lines := strings.Split(v, "\n")
			return "<<-EOT\n    " + strings.Join(lines, "\n    ") + "\n    EOT\n"
		}
		return g.str(v)
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case []string:
		parts := make([]string, len(v))
		for i, s := range v {
			parts[i] = g.str(s)
		}
		trail := ""
		if g.maybe(0.3) {
			trail = ","
		}
		return "[" + strings.Join(parts, ", ") + trail + "]"
	case map[string]string:
		var parts []string
		for _, k := range sortedKeys(v) {
			parts = append(parts, g.str(k)+" = "+g.str(v[k]))
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	}
	panic(fmt.Sprintf("%T", v))
}

func (g gen) comment() string {
	return g.pick("# c\n", "// c\n", "/* c */\n", "/* multi\n line */\n", "\n")
}

func (g gen) label(l string) string {
	if !strings.ContainsAny(l, `." `) && g.maybe(0.3) {
		return l
	}
	return strconv.Quote(l)
}

// body renders items separated as the random style says. Returns text
// that can be followed by anything (it ends in a newline when the last
// item needs one).
func (g gen) items(ns []gNode, oneLine bool) string {
	ns = append([]gNode(nil), ns...)
	g.r.Shuffle(len(ns), func(i, j int) { ns[i], ns[j] = ns[j], ns[i] })
	var b strings.Builder
	for i, n := range ns {
		text := g.node(n, oneLine)
		b.WriteString(text)
		if i == len(ns)-1 {
			break
		}
		switch {
		case strings.HasSuffix(text, "\n"):
		case oneLine:
			b.WriteString(g.pick(", ", " ", ",\n"))
		case g.maybe(0.15):
			b.WriteString(" ") // next item on the same line (after "}" too)
		case g.maybe(0.2):
			b.WriteString("\n" + g.comment())
		default:
			b.WriteString("\n")
		}
	}
	return b.String()
}

func (g gen) node(n gNode, oneLine bool) string {
	if !n.block {
		_, isMap := n.value.(map[string]string)
		if isMap && !oneLine && g.maybe(0.3) {
			// a map written as a block
			m := n.value.(map[string]string)
			var parts []string
			for _, k := range sortedKeys(m) {
				parts = append(parts, g.str(k)+" = "+g.str(m[k]))
			}
			return n.name + " {\n" + strings.Join(parts, "\n") + "\n}"
		}
		return n.name + " = " + g.value(n.value, !oneLine && n.name == "description")
	}
	inner := func(one bool) string {
		if len(n.items) == 0 {
			return "{}"
		}
		if one {
			return "{ " + g.items(n.items, true) + " }"
		}
		return "{\n" + g.items(n.items, false) + "\n}"
	}
	one := oneLine || g.maybe(0.25)
	if one && hasHeredocOrComment(n) {
		one = false
	}
	switch style := g.r.IntN(5); {
	case style == 0 && n.name != "terraform_provider" && n.name != "required_providers":
		// name = { "label" = { ... } }
		v := inner(one)
		for i := len(n.labels) - 1; i >= 0; i-- {
			v = "{ " + strconv.Quote(n.labels[i]) + " = " + v + " }"
		}
		return n.name + " = " + v
	case style == 1 && n.name != "terraform_provider" && n.name != "required_providers":
		v := inner(one)
		for i := len(n.labels) - 1; i >= 0; i-- {
			v = "{ " + strconv.Quote(n.labels[i]) + " = [" + v + "] }"
		}
		return n.name + " = [" + v + "]"
	default:
		h := n.name
		for _, l := range n.labels {
			h += " " + g.label(l)
		}
		return h + " " + inner(one)
	}
}

func hasHeredocOrComment(n gNode) bool {
	for _, c := range n.items {
		if c.block || c.name == "description" {
			return true
		}
	}
	return false
}

// TestHCL1GeneratedVariations writes random configurations in random HCL 1
// spellings and checks that ctsync reads each as CTS does.
func TestHCL1GeneratedVariations(t *testing.T) {
	clearConsulEnv(t)
	n := 300
	if testing.Short() {
		n = 60
	}
	dir := t.TempDir()
	for i := range n {
		g := gen{r: rand.New(rand.NewPCG(uint64(i), 20))}
		src := g.comment() + g.items(g.config(), false) + "\n"
		path := filepath.Join(dir, fmt.Sprintf("gen%03d.hcl", i))
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) { checkSameAsCTS(t, path) })
		if t.Failed() {
			return
		}
	}
}
