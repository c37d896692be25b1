package e2e

// Hostile catalog and KV data end to end: whatever Consul accepts reaches
// the module byte for byte, through terraform.tfvars (HCL written by
// hclwrite), and nothing in it is ever interpreted (HCL, Terraform
// templates and functions, ctsync's own {{ }} templates, shells, JSON
// structure). Two transformations happen on the way, neither of them
// ctsync's choice: text for Terraform is UTF-8, so bytes that are not valid
// UTF-8 become U+FFFD, one per byte (KV values are raw bytes in Consul), as
// JSON would write them, and Terraform keeps every string in Unicode normal
// form C.

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/consul/api"
	"golang.org/x/text/unicode/norm"

	"github.com/ctsync/ctsync/internal/testutil"
)

// hostileStrings mean something to HCL, Terraform, Go templates, shells,
// JSON or terminals.
var hostileStrings = []string{
	`quote " and 'single'`,
	`${file("/etc/passwd")}`,
	`$${escaped} and $$ and ${`,
	"%{ if true }x%{ endif }",
	`{{ key "secret/path" }} {{ env "HOME" }}`,
	`back\slash \n not a newline \u0041 \"`,
	"real\nnewline\ttab\r\ncrlf",
	"nul\x00byte",
	"unicode: žluťoučký kůň 🚀 日本語 \u2028\u2029 \ufeff",
	"<script>&amp;</script>",
	"$(rm -rf /) `id`; echo pwned",
	"\"\n}\nresource \"null_resource\" \"x\" {\n",
	`{"json": "inside", "n": [1, 2]}`,
	"\x1b[31mred\x1b[0m \x07bell",
	"",
}

// tfText is what a module receives for a string: JSON replaces invalid
// UTF-8 bytes by U+FFFD (one each), and Terraform keeps every string in
// Unicode normal form C.
func tfText(s string) string { return norm.NFC.String(jsonText(s)) }

// jsonText is what a string becomes after a trip through JSON: invalid
// UTF-8 bytes are replaced by U+FFFD, one each.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Hostile tags, meta, service names, KV keys and values, NUL bytes,
// invalid UTF-8 and 1 MiB values, for a services condition, a regexp
// selection of a hostile service name, and consul-kv conditions (single
// key and prefix).
func TestHostileCatalogAndKV(t *testing.T) {
	skipShort(t)
	// Consul caps KV values at 512 KiB by default; allow the 1 MiB one.
	c := testutil.StartConsulWith(t, testutil.ConsulOptions{HCL: []string{`limits { kv_max_value_size = 4194304 }`}})
	big := strings.Repeat("0123456789abcdef", 1<<16) + `"${x}"` // 1 MiB and a bit
	invalid := "bad utf-8: \xff\xfe \xc3\x28 \xed\xa0\x80 end"

	// Services: hostile tags (with a 1 MiB one) and meta. Consul limits
	// meta values to 512 bytes and meta keys to [A-Za-z0-9_-].
	web := reg("web-1", "web", 8001)
	web.Tags = append(slices.Clone(hostileStrings[:len(hostileStrings)-1]), big)
	web.Meta = map[string]string{}
	for i, h := range hostileStrings {
		web.Meta[fmt.Sprintf("k%d", i)] = h
	}
	// Keywords as map keys; "for" sorts first, and a bare "for" as the first
	// key of an object would start a for expression.
	web.Meta["for"] = "first key"
	web.Meta["null"] = "null"
	c.RegisterService(t, web, "passing")
	// A service whose name is hostile, selected by a regexp.
	odd := reg("odd-1", `hostile "${name}" %{x} \ 'q' {{ key "k" }}`, 8002)
	odd.Tags = []string{"nul\x00tag"}
	c.RegisterService(t, odd, "passing")

	// KV: hostile keys and values under one prefix, and a single key.
	kv := map[string]string{
		"hostile/big":                 big,
		"hostile/invalid":             invalid,
		`hostile/q"uote`:              `v"1`,
		"hostile/${interp}":           "${interp}",
		"hostile/%{directive}":        "%{directive}",
		`hostile/back\slash`:          `back\slash`,
		"hostile/sp ace & amp=eq":     "sp ace",
		"hostile/ünïcödé 🚀":           "ünïcödé 🚀",
		"hostile/{{ key \"x\" }}":     "{{ key \"x\" }}",
		"hostile/empty":               "",
		"hostile/nested/deeper/value": "deep",
		"hostile/nfd":                 "cafe\u0301 (decomposed)",
	}
	for i, h := range hostileStrings {
		kv[fmt.Sprintf("hostile/s%02d", i)] = h
	}
	for k, v := range kv {
		if _, err := c.Client.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
	}
	_, err := c.Client.KV().Put(&api.KVPair{Key: "single/key", Value: []byte(invalid + "\x00" + big)}, nil)
	must(t, err)
	// Two keys that are the same text in Unicode normal form C, which is
	// how Terraform keeps every string: Terraform cannot hold both.
	for k, v := range map[string]string{"nfc/caf\u00e9": "composed", "nfc/cafe\u0301": "decomposed"} {
		_, err := c.Client.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil)
		must(t, err)
	}

	work := t.TempDir()
	svcOut, oddOut, prefixOut, singleOut := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	oddTask := fmt.Sprintf("task {\n  name = \"odd\"\n  module = %q\n  variable_files = [%q]\n  condition \"services\" {\n    regexp = \"^hostile \"\n  }\n}",
		module("services_file"), writeFile(t, oddOut, "task.tfvars", fmt.Sprintf("dir = %q\n", oddOut)))
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "",
		servicesTask(t, "svc", "services_file", svcOut, `"web"`),
		oddTask,
		kvTask(t, "prefix", prefixOut, "hostile/", true, `"web"`),
		kvTask(t, "single", singleOut, "single/key", false, `"web"`),
		kvTask(t, "collide", t.TempDir(), "nfc/", true, `"web"`)))
	p := startCtsync(t, work, "start", "-config-file", cfg)

	got := waitIDs(t, svcOut, "web-1")["web-1.node-1.dc1"]
	wantTags := slices.Clone(web.Tags)
	slices.Sort(wantTags)
	if !slices.Equal(got.Tags, wantTags) {
		t.Errorf("tags changed on the way (%d tags, want %d)", len(got.Tags), len(wantTags))
		for i := range min(len(got.Tags), len(wantTags)) {
			if got.Tags[i] != wantTags[i] {
				t.Errorf("tag %d: got %.80q want %.80q", i, got.Tags[i], wantTags[i])
			}
		}
	}
	if !maps.Equal(got.Meta, web.Meta) {
		for k, v := range web.Meta {
			if got.Meta[k] != v {
				t.Errorf("meta %s: got %q want %q", k, got.Meta[k], v)
			}
		}
	}

	oddGot := waitIDs(t, oddOut, "odd-1")
	for _, s := range oddGot {
		if s.Name != odd.Name || !slices.Equal(s.Tags, odd.Tags) {
			t.Errorf("hostile service name or tags changed: %q %q", s.Name, s.Tags)
		}
	}

	wantKV := map[string]string{}
	for k, v := range kv {
		wantKV[k] = tfText(v)
	}
	if wantKV["hostile/nfd"] != "caf\u00e9 (decomposed)" {
		t.Fatalf("test bug: %q", wantKV["hostile/nfd"])
	}
	waitKVExact(t, prefixOut, wantKV)
	waitKVExact(t, singleOut, map[string]string{"single/key": tfText(invalid + "\x00" + big)})
	msg := waitFailedEvent(t, port, "collide", 60*time.Second, "are the same key once written for Terraform")
	t.Logf("keys equal in NFC: %s", msg)
	p.running(t)
}

// waitKVExact is waitKV with a readable diff for large values.
func waitKVExact(t *testing.T, out string, want map[string]string) {
	t.Helper()
	var got map[string]string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(testutil.Scale(60 * time.Second))
wait:
	for {
		got = nil
		if readJSON(out, "consul_kv.json", &got) && maps.Equal(got, want) {
			return
		}
		select {
		case <-tick.C:
		case <-timeout:
			break wait
		}
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("key %q: got %.100q (present %v) want %.100q", k, got[k], ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected key %q", k)
		}
	}
	t.Fatalf("consul_kv.json in %s is not what Consul holds", out)
}
