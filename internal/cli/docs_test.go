package cli

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docSegment is a piece of code in the documentation: a line of a fenced
// block or an inline code span.
type docSegment struct {
	where string // file:line
	text  string
}

// docSegments returns the code of README.md and docs/*.md.
func docSegments(t *testing.T) (all, cliDoc []docSegment) {
	t.Helper()
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	span := regexp.MustCompile("`([^`]+)`")
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		sc := bufio.NewScanner(fh)
		inBlock := false
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock = !inBlock
				continue
			}
			texts := []string{line}
			if !inBlock {
				texts = nil
				for _, m := range span.FindAllStringSubmatch(line, -1) {
					texts = append(texts, m[1])
				}
			}
			for _, text := range texts {
				s := docSegment{where: rel + ":" + strconv.Itoa(n), text: text}
				all = append(all, s)
				if rel == filepath.Join("docs", "cli.md") {
					cliDoc = append(cliDoc, s)
				}
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return all, cliDoc
}

// cliFlags are the flags each command line form accepts, read from the
// commands' flag sets: "start", "status", "task create", ..., "task" (any
// task subcommand) and "" (before a command: the commandless start and the
// top-level flags).
func cliFlags() map[string][]string {
	names := func(run func([]string, io.Writer, io.Writer) int) []string {
		out := []string{"h", "help"}
		for _, f := range commandFlags(run) {
			out = append(out, f.Name)
		}
		return out
	}
	m := map[string][]string{}
	for _, c := range topCommands {
		if c.name != "task" {
			m[c.name] = names(c.run)
		}
	}
	m["task"] = []string{"h", "help"}
	for _, c := range taskCommands {
		m["task "+c.name] = names(c.run)
		m["task"] = append(m["task"], m["task "+c.name]...)
	}
	slices.Sort(m["task"])
	m["task"] = slices.Compact(m["task"])
	m[""] = append([]string{"v", "version", flagAutocompleteInstall, flagAutocompleteUninstall}, m["start"]...)
	return m
}

// Flags the documentation names that belong to other programs (Terraform,
// go build, go test, helm) or are placeholders.
var foreignFlags = []string{"flag", "parallelism", "trimpath", "force-copy", "uninstall", "race", "set", "reuse-values"}

var (
	invocationRe = regexp.MustCompile(`^\s*(?:\$\s+)?(?:sudo\s+)?(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:\S*bin/)?(?:ctsync|consul-terraform-sync)(?:\s+(.*))?$`)
	flagSpanRe   = regexp.MustCompile(`^--?([a-z][a-z0-9-]*)`)
)

// The documentation and the command line agree: every command, task
// subcommand and flag that README.md and docs/*.md show in a ctsync command
// line (or as a flag on its own) exists, and docs/cli.md shows every
// command, task subcommand and flag there is.
func TestDocsMatchCLI(t *testing.T) {
	all, cliDoc := docSegments(t)
	flags := cliFlags()
	anyFlag := map[string]bool{}
	for _, fs := range flags {
		for _, f := range fs {
			anyFlag[f] = true
		}
	}
	topNames, taskNames := commandNames(topCommands), commandNames(taskCommands)
	placeholder := func(tok string) bool {
		return strings.HasPrefix(tok, "<") || strings.HasPrefix(tok, "…") || strings.HasPrefix(tok, "...") ||
			regexp.MustCompile(`^v\d`).MatchString(tok)
	}
	for _, s := range all {
		if m := flagSpanRe.FindStringSubmatch(s.text); m != nil && !strings.Contains(s.text, " ctsync") {
			if !anyFlag[m[1]] && !slices.Contains(foreignFlags, m[1]) {
				t.Errorf("%s: `%s`: ctsync has no flag -%s", s.where, s.text, m[1])
			}
			continue
		}
		m := invocationRe.FindStringSubmatch(s.text)
		if m == nil {
			continue
		}
		var toks []string
		for _, tok := range strings.Fields(m[1]) {
			if tok == "#" || tok == "&&" || tok == ";" || strings.HasPrefix(tok, ">") || strings.HasPrefix(tok, "2>") {
				break
			}
			if tok = strings.Trim(tok, "[]()"); tok != "" && tok != "|" {
				toks = append(toks, tok)
			}
		}
		if len(toks) == 0 || placeholder(toks[0]) {
			continue
		}
		form := ""
		if !strings.HasPrefix(toks[0], "-") {
			form, toks = toks[0], toks[1:]
			if !slices.Contains(topNames, form) {
				t.Errorf("%s: `%s`: ctsync has no command %q", s.where, s.text, form)
				continue
			}
			if form == "task" && len(toks) > 0 && !strings.HasPrefix(toks[0], "-") {
				if placeholder(toks[0]) {
					continue
				}
				if !slices.Contains(taskNames, toks[0]) {
					t.Errorf("%s: `%s`: ctsync task has no subcommand %q", s.where, s.text, toks[0])
					continue
				}
				form, toks = "task "+toks[0], toks[1:]
			}
		}
		for _, tok := range toks {
			name, _, _ := strings.Cut(strings.TrimLeft(tok, "-"), "=")
			if !strings.HasPrefix(tok, "-") || name == "" {
				continue
			}
			if !slices.Contains(flags[form], name) {
				t.Errorf("%s: `%s`: %q has no flag -%s", s.where, s.text, strings.TrimSpace(Name+" "+form), name)
			}
		}
	}

	// docs/cli.md shows every command, task subcommand and flag.
	var cliText strings.Builder
	for _, s := range cliDoc {
		cliText.WriteString(" " + s.text + "\n")
	}
	text := cliText.String()
	for _, c := range topNames {
		if !regexp.MustCompile(`(ctsync|consul-terraform-sync)\s+` + c + `\b`).MatchString(text) {
			t.Errorf("docs/cli.md shows no `ctsync %s`", c)
		}
	}
	for _, c := range taskNames {
		if !regexp.MustCompile(`task\s+(\S+\s+\|\s+)*` + c + `\b`).MatchString(text) {
			t.Errorf("docs/cli.md shows no `task %s`", c)
		}
	}
	for form, fs := range flags {
		for _, f := range fs {
			if !regexp.MustCompile(`(^|[\s\[(|])--?` + regexp.QuoteMeta(f) + `([\s=\])|]|$)`).MatchString(text) {
				t.Errorf("docs/cli.md does not name the flag -%s of %q", f, strings.TrimSpace(Name+" "+form))
			}
		}
	}
}
