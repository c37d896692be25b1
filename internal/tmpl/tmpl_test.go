package tmpl

import (
	"fmt"
	"strings"
	"testing"
)

func testSecret(path string, params []string) (*Secret, error) {
	switch path {
	case "kv/data/app":
		return &Secret{Data: map[string]any{"data": map[string]any{"user": "alice", "pass": "pw-1", "port": 8080.0},
			"metadata": map[string]any{"version": 3.0}}}, nil
	case "kv1/app":
		return &Secret{LeaseDuration: 60, Data: map[string]any{"token": "t0k3n"}}, nil
	case "pki/issue/web":
		return &Secret{LeaseID: "pki/1", Renewable: true, LeaseDuration: 30,
			Data: map[string]any{"cn": strings.Join(params, ",")}}, nil
	}
	return nil, fmt.Errorf("no secret at %q", path)
}

func TestRenderSecrets(t *testing.T) {
	t.Setenv("CTSYNC_X", "x")
	l := Lookups{Secret: testSecret}
	for in, want := range map[string]string{
		`{{ with secret "kv/data/app" }}{{ .Data.data.user }}:{{ .Data.data.pass }}{{ end }}`:                               "alice:pw-1",
		`{{with secret "/kv/data/app/"}}{{.Data.data.port}}{{end}}`:                                                         "8080",
		`u={{ with secret "kv1/app" }}{{ .Data.token }} ({{ .LeaseDuration }}s){{ end }}!`:                                  "u=t0k3n (60s)!",
		`{{ with secret "pki/issue/web" "common_name=a" "ttl=1h" }}{{ .Data.cn }} {{ .LeaseID }} {{ .Renewable }}{{ end }}`: "common_name=a,ttl=1h pki/1 true",
		`{{ with secret "kv/data/app" }}{{ env "CTSYNC_X" }}-{{ .Data.metadata.version }}{{ end }}`:                         "x-3",
		`{{ with secret "kv/data/app" -}}   {{ .Data.data.user }}   {{- end }}`:                                             "alice",
	} {
		got, err := Render(in, l)
		if err != nil || got != want {
			t.Errorf("render(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		`{{ with secret "kv/data/app" }}{{ .Data.data.nope }}{{ end }}`:    `secret "kv/data/app" has no value at .Data.data.nope`,
		`{{ with secret "kv/data/app" }}{{ .Data.data.user.x }}{{ end }}`:  `.Data.data.user is not a map`,
		`{{ with secret "kv/data/app" }}{{ .Secret }}{{ end }}`:            `.Secret is not a field of a secret`,
		`{{ with secret "missing/path" }}{{ .Data }}{{ end }}`:             `no secret at "missing/path"`,
		`{{ with secret "kv/data/app" }}{{ .Data.data.pass }}{{ end }}{{ `: "unterminated",
	} {
		_, err := Render(in, l)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("render(%q) error = %v, want %q", in, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "pw-1") || strings.Contains(err.Error(), "alice")) {
			t.Errorf("render(%q) error quotes a secret value: %v", in, err)
		}
	}
}

func TestRenderTemplates(t *testing.T) {
	t.Setenv("CTSYNC_X", "x")
	key := func(path, dc string) (string, error) { return "<" + path + "|" + dc + ">", nil }
	for in, want := range map[string]string{
		"plain":                                         "plain",
		"json {\"a\": {\"b\": 1}}":                      "json {\"a\": {\"b\": 1}}",
		`{{ env "CTSYNC_X" }}`:                          "x",
		`a {{- env "CTSYNC_X" -}}  b`:                   "axb",
		`{{env "CTSYNC_UNSET_VAR"}}!`:                   "!",
		`{{ env "CTSYNC_X" }}{{env "CTSYNC_X"}}`:        "xx",
		"{{ env `CTSYNC_X` }}":                          "x",
		`{{ key "a/b" }}`:                               "<a/b|>",
		`pre-{{ key "/a/b@dc2" }}-{{ env "CTSYNC_X" }}`: "pre-<a/b|dc2>-x",
	} {
		got, err := Render(in, Lookups{Key: key})
		if err != nil || got != want {
			t.Errorf("render(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		`{{ with secret "a" }}{{ .Data }}{{ end }}`: "missing Vault configuration",
		`{{ secret "a" }}`:                          `write a Vault secret as {{ with secret "path" }}`,
		`{{ with secret }}{{ end }}`:                "needs a quoted Vault path",
		`{{ with secret "a" "novalue" }}{{ end }}`:  `must be "key=value"`,
		`{{ with secret "a" }}{{ else }}{{ end }}`:  "{{ else }} is not supported",
		`{{ end }}`: "{{ end }} without a {{ with secret }}",
		`{{ with secret "a" }}{{ with secret "b" }}`: "cannot be nested",
		`{{ env X }}`: "template action 1 is not supported",
		`a {{ env "A" }} {{ keyOrDefault "k" "d" }}`: "template action 2 is not supported",
		`{{ key "a@" }}`:   "needs a datacenter",
		`{{ key "" }}`:     "needs a KV path",
		`{{ env "" }}`:     "needs a variable name",
		`{{ env "A" }} {{`: "unterminated",
		`{{ env "A`:        "unterminated",
	} {
		_, err := Render(in, Lookups{Key: key})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("render(%q) error = %v, want %q", in, err, want)
		}
	}
	if _, err := Render(`{{ key "k" }}`, Lookups{}); err == nil {
		t.Error("{{ key }} without a lookup must fail")
	}
}
