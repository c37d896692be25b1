package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/config"
)

func TestListensBeyondLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		":8558":            true, // every interface
		"0.0.0.0:8558":     true,
		"[::]:8558":        true,
		"10.0.0.5:8558":    true,
		"[fe80::1%eth0]:1": true,
		"192.168.1.1":      true,
		"example.com:80":   true,
		"":                 true,
		"127.0.0.1:8558":   false,
		"127.1.2.3:8558":   false,
		"[::1]:8558":       false,
		"localhost:8558":   false,
		"LOCALHOST.:8558":  false,
		"a.localhost:1":    false,
		"::1":              false,
	} {
		if got := ListensBeyondLoopback(addr); got != want {
			t.Errorf("ListensBeyondLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// Listening on every interface without tokens is logged at WARN when the
// port is bound, and GET /v1/status carries the warning for the
// dashboard; on loopback, or with tokens, there is no warning.
func TestExposureWarning(t *testing.T) {
	status := func(srv *Server, token string) StatusResponse {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+srv.Addr()+"/v1/status", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st StatusResponse
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, c := range []struct {
		addr   string
		tokens []config.APIToken
		warn   bool
	}{
		{":0", nil, true},
		{"127.0.0.1:0", nil, false},
		{":0", []config.APIToken{{Name: "ops", Secret: "ops-secret-0123456789", Access: config.AccessWrite}}, false},
	} {
		h := newHarness(t, nil, func(o *Options) { o.Addr, o.Tokens = c.addr, c.tokens })
		if err := h.srv.Listen(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = h.srv.Run(t.Context()) }()
		logged := strings.Contains(h.logs.String(), "level=WARN") && strings.Contains(h.logs.String(), "without api_auth")
		token := ""
		if c.tokens != nil {
			token = c.tokens[0].Secret
		}
		st := status(h.srv, token)
		if logged != c.warn || (len(st.Warnings) == 1) != c.warn {
			t.Errorf("%s with %d tokens: logged %v, /v1/status warnings %q; want a warning: %v\n%s", c.addr, len(c.tokens), logged, st.Warnings, c.warn, h.logs)
		}
		if c.warn && !strings.Contains(st.Warnings[0], "anyone who can reach port") {
			t.Errorf("warning: %q", st.Warnings[0])
		}
	}
}
