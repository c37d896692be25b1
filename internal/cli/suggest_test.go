package cli

import "testing"

func TestSuggest(t *testing.T) {
	cands := []string{"start", "status", "task", "version", "auto-approve", "http-addr"}
	for word, want := range map[string]string{
		"strat":       "start",
		"stat":        "start", // as close to start as to status: the first wins
		"onec":        "",
		"stauts":      "status",
		"tsak":        "task",
		"verison":     "version",
		"auto-aprove": "auto-approve",
		"http-adr":    "http-addr",
		"x":           "",
		"deploy":      "",
		"ab":          "",
	} {
		if got := suggest(word, cands); got != want {
			t.Errorf("suggest(%q) = %q, want %q", word, got, want)
		}
	}
}
