package api

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/api/testcerts"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

const (
	readSecret  = "read-secret-0123456789abcdef"
	writeSecret = "write-secret-0123456789abcdef"
)

var testTokens = []config.APIToken{
	{Name: "dashboard", Secret: readSecret, Access: config.AccessRead},
	{Name: "ops", Secret: writeSecret, Access: config.AccessWrite},
}

func withTokens(ts ...config.APIToken) harnessOpt { return func(o *Options) { o.Tokens = ts } }

// send sends a request with the given headers ("Host" sets the Host
// header) and checks the response against the OpenAPI file.
func (h *harness) send(method, path, body string, hdr map[string]string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, body: b}
	checkSpec(h.t, req, r)
	return r
}

// raw sends a request to a route outside the /v1 spec (metrics, UI).
func (h *harness) raw(method, path string, hdr map[string]string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func taskBody(name, module string) string {
	return `{"task":{"name":"` + name + `","module":"` + module + `","condition":{"services":{"names":["web"]}}}}`
}

func TestNoWildcardCORS(t *testing.T) {
	h := newHarness(t, nil)
	r := h.send("OPTIONS", "/v1/tasks", "", map[string]string{"Origin": "https://evil.example",
		"Access-Control-Request-Method": "POST"}).expect(t, 200)
	r2 := h.send("GET", "/v1/status", "", map[string]string{"Origin": "https://evil.example"}).expect(t, 200)
	for _, resp := range []response{r, r2} {
		for k := range resp.header {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("CORS header %s: %q sent to an origin not listed", k, resp.header.Get(k))
			}
		}
	}
}

func TestCORSListedOrigin(t *testing.T) {
	const origin = "https://dash.example.com"
	h := newHarness(t, nil, func(o *Options) { o.HTTP.CORSOrigins = []string{origin} })
	r := h.send("OPTIONS", "/v1/tasks", "", map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST"}).expect(t, 200)
	if r.header.Get("Access-Control-Allow-Origin") != origin || !strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight headers %v", r.header)
	}
	for _, m := range []string{"GET", "POST", "PATCH", "DELETE"} {
		if !strings.Contains(r.header.Get("Access-Control-Allow-Methods"), m) {
			t.Errorf("allow methods %q lack %s", r.header.Get("Access-Control-Allow-Methods"), m)
		}
	}
	// The listed origin may write from the browser.
	h.send("POST", "/v1/tasks", taskBody("fromdash", "m"), map[string]string{"Origin": origin,
		"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}).expect(t, 201)
	// Another origin gets no CORS header and cannot write.
	r = h.send("POST", "/v1/tasks", taskBody("fromevil", "m"), map[string]string{"Origin": "https://evil.example",
		"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}).expect(t, 403)
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("ACAO %q for an unlisted origin", r.header.Get("Access-Control-Allow-Origin"))
	}
}

func TestCrossSiteWritesRefused(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []struct {
		name string
		hdr  map[string]string
	}{
		{"simple request from another site", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}},
		{"same-site other origin", map[string]string{"Content-Type": "text/plain", "Origin": "http://other.localhost", "Sec-Fetch-Site": "same-site"}},
		{"old browser: Origin only", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}},
		{"form post", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "null", "Sec-Fetch-Site": "cross-site"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.send("POST", "/v1/tasks", taskBody("xsite", "m"), c.hdr).expect(t, 403)
			if msg := r.errMsg(t); !strings.Contains(msg, "cross-origin request refused") {
				t.Errorf("message %q", msg)
			}
			for _, m := range []string{"PATCH", "DELETE"} {
				h.send(m, "/v1/tasks/xsite", `{"enabled":false}`, c.hdr).expect(t, 403)
			}
		})
	}
	h.do("GET", "/v1/tasks/xsite", "").expect(t, 404)
	// What scripts and CLIs send is accepted: no Origin, any content type
	// (curl --data posts application/x-www-form-urlencoded).
	h.send("POST", "/v1/tasks", taskBody("curl", "m"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}).expect(t, 201)
	h.send("POST", "/v1/tasks", taskBody("bare", "m"), nil).expect(t, 201)
	// So is the dashboard: same origin.
	h.send("POST", "/v1/tasks", taskBody("dash", "m"), map[string]string{"Content-Type": "application/json",
		"Origin": h.ts.URL, "Sec-Fetch-Site": "same-origin"}).expect(t, 201)
	// Reads are not writes.
	h.send("GET", "/v1/tasks", "", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}).expect(t, 200)
	if !strings.Contains(h.logs.String(), "cross-origin write refused") {
		t.Errorf("refusals not logged:\n%s", h.logs)
	}
}

func TestHostGuard(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.HTTP.AllowedHosts = []string{"ctsync.internal"} })
	for host, want := range map[string]int{
		"evil.example":           403,
		"evil.example:8558":      403,
		"127.0.0.1":              200,
		"[::1]:8558":             200,
		"10.1.2.3:8558":          200,
		"localhost:8558":         200,
		"LOCALHOST":              200,
		"app.localhost":          200,
		"ctsync.internal:8558":   200,
		"Ctsync.Internal.":       200,
		"ctsync.internal.evil":   403,
		"localhost.evil.example": 403,
	} {
		r := h.send("GET", "/v1/status", "", map[string]string{"Host": host})
		if r.status != want {
			t.Errorf("Host %q: %d, want %d (%s)", host, r.status, want, r.body)
		}
		if want == 403 && !strings.Contains(r.errMsg(t), "api_http.allowed_hosts") {
			t.Errorf("Host %q: message %s", host, r.body)
		}
	}
	// Consul's health check may use any name.
	h.send("GET", "/v1/health", "", map[string]string{"Host": "evil.example"}).expect(t, 200)
	// With tokens, the token is the guard.
	ht := newHarness(t, nil, withTokens(testTokens...))
	ht.send("GET", "/v1/status", "", map[string]string{"Host": "ctsync.example.com", "Authorization": "Bearer " + readSecret}).expect(t, 200)
}

func TestTokens(t *testing.T) {
	h := newHarness(t, nil, withTokens(testTokens...))
	h.srv.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "m 1\n") }))
	h.srv.Handle("/ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html>") }))
	bearer := func(s string) map[string]string { return map[string]string{"Authorization": "Bearer " + s} }

	// No token, a malformed header, an unknown token: 401 with the CTS
	// error shape.
	for _, hdr := range []map[string]string{nil, {"Authorization": "Basic b3BzOnNlY3JldA=="}, {"Authorization": "Bearer"},
		bearer("nope-0123456789abcdef"), bearer(readSecret + "x"), bearer(readSecret[:len(readSecret)-1])} {
		if r := h.raw("GET", "/metrics", hdr); r.status != 401 {
			t.Errorf("/metrics: %d", r.status)
		}
		for _, p := range []string{"/v1/status", "/v1/tasks", "/v1/status/cluster"} {
			r := h.send("GET", p, "", hdr).expect(t, 401)
			if msg := r.errMsg(t); !strings.Contains(msg, "token") && !strings.Contains(msg, "Authorization") {
				t.Errorf("401 message %q", msg)
			}
			if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
			}
		}
		h.send("POST", "/v1/tasks", taskBody("anon", "m"), hdr).expect(t, 401)
	}
	// Open without a token: the health check and the dashboard's files.
	h.send("GET", "/v1/health", "", nil).expect(t, 200)
	if r := h.raw("GET", "/ui/", nil); r.status != 200 {
		t.Errorf("/ui/ without a token: %d", r.status)
	}

	// A read token reads, and may not write.
	h.send("GET", "/v1/tasks", "", bearer(readSecret)).expect(t, 200)
	if r := h.raw("GET", "/metrics", map[string]string{"Authorization": "bearer  " + readSecret}); r.status != 200 {
		t.Errorf("/metrics with a read token: %d", r.status)
	}
	for _, w := range []struct{ method, path, body string }{
		{"POST", "/v1/tasks", taskBody("byread", "m")},
		{"POST", "/v1/tasks?run=inspect", taskBody("byread", "m")},
		{"PATCH", "/v1/tasks/byread", `{"enabled":false}`},
		{"DELETE", "/v1/tasks/byread", ""},
		{"POST", "/v1/tasks/byread/run", ""},
	} {
		r := h.send(w.method, w.path, w.body, bearer(readSecret)).expect(t, 403)
		if msg := r.errMsg(t); !strings.Contains(msg, `token "dashboard" has read access`) {
			t.Errorf("%s %s: %q", w.method, w.path, msg)
		}
	}
	// A write token does everything.
	h.send("POST", "/v1/tasks", taskBody("byops", "m"), bearer(writeSecret)).expect(t, 201)
	// (409 while the new task waits for its data: past the access rules.)
	if r := h.send("PATCH", "/v1/tasks/byops", `{"enabled":false}`, bearer(writeSecret)); r.status != 200 && r.status != 409 {
		t.Errorf("PATCH with a write token: %d %s", r.status, r.body)
	}
	h.send("GET", "/v1/tasks/byops", "", bearer(writeSecret)).expect(t, 200)
	h.send("DELETE", "/v1/tasks/byops", "", bearer(writeSecret)).expect(t, 202)

	// The audit log names the token, never a secret.
	logs := h.logs.String()
	for _, want := range []string{`msg="api write" method=POST path=/v1/tasks query="" status=201 token=ops`,
		`msg="task created through the api" task_name=byops`, "token=ops", "status=403 token=dashboard"} {
		if want == "status=403 token=dashboard" {
			continue // refused before the handler: logged as a refusal
		}
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if !strings.Contains(logs, `write refused to a read token" token=dashboard`) {
		t.Errorf("the refusal does not name the token:\n%s", logs)
	}
	for _, s := range []string{readSecret, writeSecret} {
		if strings.Contains(logs, s) {
			t.Errorf("a token secret is in the log")
		}
	}
}

func TestAuditWithoutAuth(t *testing.T) {
	h := newHarness(t, nil)
	h.do("POST", "/v1/tasks", taskBody("a", "m")).expect(t, 201)
	if !strings.Contains(h.logs.String(), `msg="api write" method=POST path=/v1/tasks query="" status=201 token="(auth off)"`) {
		t.Errorf("no audit line:\n%s", h.logs)
	}
}

func TestTokenFileReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ops.token")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first-secret-0123456789")
	h := newHarness(t, nil, withTokens(config.APIToken{Name: "ops", Secret: "first-secret-0123456789", SecretFile: file, Access: config.AccessWrite}))
	auth := func(s string) map[string]string { return map[string]string{"Authorization": "Bearer " + s} }
	h.send("GET", "/v1/tasks", "", auth("first-secret-0123456789")).expect(t, 200)

	write("second-secret-0123456789")
	if err := h.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	h.send("GET", "/v1/tasks", "", auth("first-secret-0123456789")).expect(t, 401)
	h.send("GET", "/v1/tasks", "", auth("second-secret-0123456789")).expect(t, 200)

	// A broken file keeps the previous secret and says so.
	write("tiny1")
	if err := h.srv.Reload(); err == nil || !strings.Contains(err.Error(), "previous secrets stay in use") || strings.Contains(err.Error(), "tiny1") {
		t.Fatalf("Reload: %v", err)
	}
	h.send("GET", "/v1/tasks", "", auth("second-secret-0123456789")).expect(t, 200)
}

// A reload is checked as the configuration is at start-up, and is all or
// nothing: two tokens with one secret are refused (the write token would
// otherwise answer as the read one, or the other way round), and one bad
// file keeps every token as it was.
func TestTokenReloadValidatesTheWholeSet(t *testing.T) {
	dir := t.TempDir()
	opsFile, dashFile := filepath.Join(dir, "ops.token"), filepath.Join(dir, "dash.token")
	write := func(file, s string) {
		if err := os.WriteFile(file, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const ops, dash = "ops-secret-0123456789", "dash-secret-0123456789"
	write(opsFile, ops)
	write(dashFile, dash)
	h := newHarness(t, nil, withTokens(
		config.APIToken{Name: "ops", Secret: ops, SecretFile: opsFile, Access: config.AccessWrite},
		config.APIToken{Name: "dash", Secret: dash, SecretFile: dashFile, Access: config.AccessRead}))
	auth := func(s string) map[string]string { return map[string]string{"Authorization": "Bearer " + s} }
	still := func() {
		t.Helper()
		h.send("POST", "/v1/tasks/nope/run", "", auth(ops)).expect(t, 404) // write access: the task is unknown
		h.send("POST", "/v1/tasks/nope/run", "", auth(dash)).expect(t, 403)
		h.send("GET", "/v1/tasks", "", auth(dash)).expect(t, 200)
	}
	still()

	// The read token's file now holds the write token's secret.
	write(dashFile, ops)
	err := h.srv.Reload()
	if err == nil || !strings.Contains(err.Error(), `token "dash" has the same secret as token "ops"`) || strings.Contains(err.Error(), ops) {
		t.Fatalf("Reload: %v", err)
	}
	still()
	if !strings.Contains(h.logs.String(), "reload refused") {
		t.Errorf("the refused reload is not logged:\n%s", h.logs)
	}

	// One new valid secret and one broken file: nothing changes.
	write(dashFile, "dash-secret-new-0123456789")
	write(opsFile, "short")
	if err := h.srv.Reload(); err == nil || !strings.Contains(err.Error(), `token "ops"`) {
		t.Fatalf("Reload: %v", err)
	}
	still()
	h.send("GET", "/v1/tasks", "", auth("dash-secret-new-0123456789")).expect(t, 401)

	// Both fixed: both change.
	write(opsFile, "ops-secret-new-0123456789")
	if err := h.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	h.send("GET", "/v1/tasks", "", auth(ops)).expect(t, 401)
	h.send("POST", "/v1/tasks/nope/run", "", auth("ops-secret-new-0123456789")).expect(t, 404)
	h.send("POST", "/v1/tasks/nope/run", "", auth("dash-secret-new-0123456789")).expect(t, 403)
}

func TestModuleAllowlist(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) {
		o.Tasks = config.APITasks{AllowedModules: []string{"./modules/*", "registry.example.com/net/*"}}
	})
	h.do("POST", "/v1/tasks", taskBody("ok", "./modules/lb")).expect(t, 201)
	h.do("POST", "/v1/tasks", taskBody("ok2", "registry.example.com/net/fw")).expect(t, 201)
	for _, run := range []string{"", "?run=now", "?run=inspect"} {
		for _, mod := range []string{"/tmp/evil", "./modules/../evil", "git::https://evil.example/x", "registry.example.com/net/fw/../../x"} {
			r := h.do("POST", "/v1/tasks"+run, taskBody("bad", mod)).expect(t, 403)
			if msg := r.errMsg(t); !strings.Contains(msg, "api_tasks.allowed_modules") {
				t.Errorf("message %q", msg)
			}
		}
	}
	h.do("GET", "/v1/tasks/bad", "").expect(t, 404)

	off := newHarness(t, nil, func(o *Options) { o.Tasks.CreateDisabled = true })
	for _, run := range []string{"", "?run=now", "?run=inspect"} {
		r := off.do("POST", "/v1/tasks"+run, taskBody("x", "m")).expect(t, 403)
		if msg := r.errMsg(t); !strings.Contains(msg, "create = false") {
			t.Errorf("message %q", msg)
		}
	}
}

func TestSchemaErrorPhrases(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []struct{ body, want []string }{
		{[]string{`{"task":{"name":"x","module":true,"condition":{"services":{"names":["web"]}}}}`},
			[]string{"request body has an error: doesn't match schema", "value must be a string", "task.module", "expected a string, got a JSON bool"}},
		{[]string{`{"task":{"name":"x","module":"m","colour":1,"condition":{"services":{"names":["web"]}}}}`},
			[]string{"request body has an error: doesn't match schema", `property "colour" is unsupported`, `unknown field "colour" in task`}},
		{[]string{`{"task":{"module":"m","condition":{"services":{"names":["web"]}}}}`},
			[]string{"request body has an error: doesn't match schema", `property "name" is missing`}},
		{[]string{`{"task":{"name":"x","module":"m","condition":{"services":{"names":"web"}}}}`},
			[]string{"value must be an array", "task.condition.services.names"}},
	} {
		msg := h.do("POST", "/v1/tasks", c.body[0]).expect(t, 400).errMsg(t)
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q lacks %q", c.body[0], msg, w)
			}
		}
	}
	msg := h.do("PATCH", "/v1/tasks/x", `{"enabled":"yes"}`).expect(t, 400).errMsg(t)
	if !strings.Contains(msg, "value must be a boolean") || !strings.Contains(msg, "doesn't match schema") {
		t.Errorf("PATCH message %q", msg)
	}
}

func TestLogAllowed(t *testing.T) {
	root := t.TempDir()
	logs := filepath.Join(root, "web", "logs")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(logs, "run-1.log")
	if err := os.WriteFile(good, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(logs, "link.log")
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	dirs := []string{root}
	for p, want := range map[string]bool{
		good:                                    true,
		filepath.Join(logs, "gone.log"):         true, // served as "gone"
		"/etc/passwd":                           false,
		filepath.Join(root, "web", "main.tf"):   false,
		filepath.Join(logs, "..", "x.log"):      false,
		filepath.Join(root, "..", "logs/x.log"): false,
		"web/logs/run-1.log":                    false,
		link:                                    false,
	} {
		if got := logAllowed(p, dirs); got != want {
			t.Errorf("logAllowed(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestCheckStoredTask(t *testing.T) {
	rules := config.APITasks{AllowedModules: []string{"./modules/*"}}
	ok := servicesTask("web", "web")
	ok.Module = "./modules/lb"
	if err := CheckStoredTask("web", ok, rules, nil); err != nil {
		t.Fatalf("valid task refused: %v", err)
	}
	bad := func(f func(*task.Spec)) task.Spec { s := ok; f(&s); return s }
	for name, c := range map[string]struct {
		key  string
		spec task.Spec
	}{
		"name differs":   {"other", ok},
		"path traversal": {"../../etc", bad(func(s *task.Spec) { s.Name = "../../etc" })},
		"module":         {"web", bad(func(s *task.Spec) { s.Module = "/tmp/evil" })},
		"working dir":    {"web", bad(func(s *task.Spec) { s.WorkingDir = "/etc" })},
		"no condition":   {"web", bad(func(s *task.Spec) { s.Condition = task.Condition{} })},
	} {
		if err := CheckStoredTask(c.key, c.spec, rules, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := CheckStoredTask("web", ok, config.APITasks{CreateDisabled: true}, nil); err == nil {
		t.Error("accepted with create = false")
	}
}

// TestPlainHTTPToTLSPort: every method sent as plain HTTP to the TLS port
// gets CTS's (Go's) 400 answer instead of a closed connection.
func TestPlainHTTPToTLSPort(t *testing.T) {
	certs := testcerts.Generate(t)
	srv, _ := runServer(t, config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey})
	for _, m := range []string{"GET", "POST", "PATCH", "DELETE", "PUT"} {
		conn, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(testutil.Scale(10 * time.Second)))
		_, _ = io.WriteString(conn, m+" /v1/tasks/x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "Client sent an HTTP request to an HTTPS server") {
			t.Errorf("%s: %d %q", m, resp.StatusCode, b)
		}
	}
	// TLS still works after that.
	if code, err := get(tlsClient(t, certs.CACert, "", ""), "https://"+srv.Addr()+"/v1/health"); err != nil || code != 200 {
		t.Fatalf("TLS client: %d %v", code, err)
	}
}

func TestTLSDefaultsAndReload(t *testing.T) {
	first, second := testcerts.Generate(t), testcerts.Generate(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	install := func(f testcerts.Files) {
		for src, dst := range map[string]string{f.ServerCert: certFile, f.ServerKey: keyFile} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(first)
	srv, _ := runServer(t, config.APITLS{Enabled: true, Cert: certFile, Key: keyFile})
	url := "https://" + srv.Addr() + "/v1/health"
	fresh := func(ca string) *http.Client {
		c := tlsClient(t, ca, "", "")
		c.Transport.(*http.Transport).DisableKeepAlives = true
		return c
	}
	if _, err := get(fresh(first.CACert), url); err != nil {
		t.Fatal(err)
	}
	// Weak TLS 1.2 suites are refused.
	weak := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(t, first.CACert),
		MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}}}}
	if _, err := get(weak, url); err == nil {
		t.Error("a non-forward-secret or CBC suite was accepted")
	}
	install(second)
	if _, err := get(fresh(second.CACert), url); err == nil {
		t.Fatal("the new certificate is served before the reload")
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(fresh(second.CACert), url); err != nil {
		t.Fatalf("after reload: %v", err)
	}
	// A broken pair keeps the current one.
	if err := os.WriteFile(keyFile, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err == nil {
		t.Fatal("Reload accepted a broken key")
	}
	if _, err := get(fresh(second.CACert), url); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
}

func TestParseBearer(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer abc":           "abc",
		"bearer abc":           "abc",
		"BEARER   abc  ":       "abc",
		" Bearer abc":          "abc",
		"Bearer":               "",
		"Bearer ":              "",
		"Basic abc":            "",
		"Bearerabc":            "",
		"Bearer a b":           "",
		"Bearer a\tb":          "",
		"":                     "",
		"Token abc":            "",
		"Bearer abc\x00":       "",
		"Bearer \u00e9t\u00e9": "\u00e9t\u00e9",
	} {
		got, ok := ParseBearer(h)
		if got != want || ok != (want != "") {
			t.Errorf("ParseBearer(%q) = %q, %v; want %q", h, got, ok, want)
		}
	}
}

func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x", "Basic Zm9vOmJhcg==", "Bearer", " Bearer a b", "Bearer \x7f", "BEARER tok-0123456789abcdef"} {
		f.Add(s)
	}
	tokens := NewTokens(testTokens)
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := ParseBearer(h)
		if !ok {
			if tok != "" {
				t.Fatalf("%q: token %q with ok false", h, tok)
			}
			return
		}
		if tok == "" || strings.ContainsAny(tok, " \t\r\n\x00") || !strings.Contains(h, tok) {
			t.Fatalf("%q: bad token %q", h, tok)
		}
		// What a client builds from the token parses back to it.
		if again, ok := ParseBearer("Bearer " + tok); !ok || again != tok {
			t.Fatalf("round trip of %q: %q %v", tok, again, ok)
		}
		// Only the exact secrets match.
		name, access := tokens.lookup(tok)
		switch tok {
		case readSecret:
			if name != "dashboard" || access != accessRead {
				t.Fatalf("read token: %q %d", name, access)
			}
		case writeSecret:
			if name != "ops" || access != accessWrite {
				t.Fatalf("write token: %q %d", name, access)
			}
		default:
			if access != accessNone {
				t.Fatalf("%q matched token %q", tok, name)
			}
		}
	})
}

// With allowed_modules set, an API task may set only the variables
// allowed_variables names and read only the KV keys under
// allowed_kv_prefixes (conditions and module inputs, key and prefix
// forms); the 403 names the variable or the key. Without allowed_modules
// anything goes, as in CTS.
func TestVariableAndKVAllowlist(t *testing.T) {
	rules := config.APITasks{AllowedModules: []string{"./modules/*"},
		AllowedVariables: []string{"service_name", "upstream_*"}, AllowedKVPrefixes: []string{"net/"}}
	h := newHarness(t, nil, func(o *Options) { o.Tasks = rules })
	body := func(name, rest string) string {
		return `{"task":{"name":"` + name + `","module":"./modules/lb",` + rest + `}}`
	}
	svc := `"condition":{"services":{"names":["web"]}}`
	h.do("POST", "/v1/tasks", body("ok", `"variables":{"service_name":"\"web\"","upstream_port":"8080"},`+svc)).expect(t, 201)
	h.do("POST", "/v1/tasks", body("kv", `"condition":{"consul_kv":{"path":"net/lb","recurse":true}}`)).expect(t, 201)
	h.do("POST", "/v1/tasks", body("kvin", svc+`,"module_input":{"consul_kv":{"path":"net/x"}}`)).expect(t, 201)
	for _, c := range []struct{ name, rest, want string }{
		{"v1", `"variables":{"reload_command":"\"id > /tmp/pwned\""},` + svc, `variable "reload_command"`},
		{"v2", `"variables":{"service_name":"\"web\"","upstream_file":"\"/etc/x\"","upstreamx":"1"},` + svc, `variable "upstreamx"`},
		{"k1", `"condition":{"consul_kv":{"path":"secrets/db_password"}}`, `key "secrets/db_password"`},
		{"k2", `"condition":{"consul_kv":{"path":"net","recurse":true}}`, `prefix "net"`},
		{"k3", `"condition":{"consul_kv":{"path":"net/../secrets/x"}}`, `"net/../secrets/x"`},
		{"k4", svc + `,"module_input":{"consul_kv":{"path":"secrets/","recurse":true}}`, `task.module_input.consul_kv.path`},
	} {
		for _, run := range []string{"", "?run=inspect"} {
			r := h.do("POST", "/v1/tasks"+run, body(c.name, c.rest)).expect(t, 403)
			if msg := r.errMsg(t); !strings.Contains(msg, c.want) {
				t.Errorf("%s: message %q, want %q", c.name, msg, c.want)
			}
		}
		h.do("GET", "/v1/tasks/"+c.name, "").expect(t, 404)
	}
	// Another task's outputs: not covered by the allowlist, refused;
	// depends_on (no data) is allowed.
	h.do("POST", "/v1/tasks", body("after", `"depends_on":["ok"],`+svc)).expect(t, 201)
	for _, run := range []string{"", "?run=now", "?run=inspect"} {
		r := h.do("POST", "/v1/tasks"+run, body("outs", svc+`,"module_input":{"task_outputs":{"tasks":["ok"]}}`)).expect(t, 403)
		if msg := r.errMsg(t); !strings.Contains(msg, "task.module_input.task_outputs is not allowed") {
			t.Errorf("task_outputs%s: message %q", run, msg)
		}
	}
	h.do("GET", "/v1/tasks/outs", "").expect(t, 404)
	// cts_user_defined_meta reaches the module like a variable: refused.
	for _, c := range []struct{ rest, want string }{
		{`"condition":{"services":{"names":["web"],"cts_user_defined_meta":{"cmd":"id"}}}`, "task.condition.services.cts_user_defined_meta"},
		{`"condition":{"schedule":{"cron":"@daily"}},"module_input":{"services":{"names":["api"],"cts_user_defined_meta":{"cmd":"id"}}}`, "task.module_input.services.cts_user_defined_meta"},
	} {
		r := h.do("POST", "/v1/tasks?run=inspect", body("meta", c.rest)).expect(t, 403)
		if msg := r.errMsg(t); !strings.Contains(msg, c.want+" is not allowed") {
			t.Errorf("meta: message %q", msg)
		}
	}
	// No allowed_variables: no variable at all.
	strict := newHarness(t, nil, func(o *Options) { o.Tasks = config.APITasks{AllowedModules: []string{"./modules/*"}} })
	r := strict.do("POST", "/v1/tasks", body("v", `"variables":{"a":"1"},`+svc)).expect(t, 403)
	if msg := r.errMsg(t); !strings.Contains(msg, "none set") {
		t.Errorf("message %q", msg)
	}
	// No allowlist: CTS.
	open := newHarness(t, nil)
	open.do("POST", "/v1/tasks", body("v", `"variables":{"reload_command":"\"x\""},"condition":{"consul_kv":{"path":"secrets/a"}}`)).expect(t, 201)
	open.do("POST", "/v1/tasks", body("o", svc+`,"module_input":{"task_outputs":{"tasks":["v"]}}`)).expect(t, 201)
	open.do("POST", "/v1/tasks", body("m", `"condition":{"services":{"names":["web"],"cts_user_defined_meta":{"a":"b"}}}`)).expect(t, 201)
}

// A stored task (high availability) passes the same allowlist.
func TestStoredTaskAllowlist(t *testing.T) {
	rules := config.APITasks{AllowedModules: []string{"./modules/*"}, AllowedKVPrefixes: []string{"net/"}}
	s := servicesTask("x", "web")
	s.Module = "./modules/lb"
	if err := CheckStoredTask("x", s, rules, nil); err != nil {
		t.Fatal(err)
	}
	s.Variables = map[string]string{"reload_command": `"id"`}
	if err := CheckStoredTask("x", s, rules, nil); err == nil || !strings.Contains(err.Error(), "reload_command") {
		t.Fatalf("variable: %v", err)
	}
	s.Variables = nil
	s.ModuleInput.ConsulKV = &task.ConsulKVSelector{Path: "secrets/a"}
	if err := CheckStoredTask("x", s, rules, nil); err == nil || !strings.Contains(err.Error(), "secrets/a") {
		t.Fatalf("kv: %v", err)
	}
	s.ModuleInput.ConsulKV = nil
	s.ModuleInput.TaskOutputs = &task.TaskOutputsSelector{Tasks: []string{"db"}}
	if err := CheckStoredTask("x", s, rules, nil); err == nil || !strings.Contains(err.Error(), "task_outputs") {
		t.Fatalf("task outputs: %v", err)
	}
}

// SIGHUP reloads the client CA of verify_incoming too: a client whose
// certificate the new CA signed is let in, one of the old CA is not; a
// broken CA file keeps the CA in force.
func TestClientCAReload(t *testing.T) {
	first, second := testcerts.Generate(t), testcerts.Generate(t)
	caFile := filepath.Join(t.TempDir(), "client-ca.pem")
	install := func(src string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(caFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	install(first.CACert)
	srv, _ := runServer(t, config.APITLS{Enabled: true, Cert: first.ServerCert, Key: first.ServerKey, CACert: caFile, VerifyIncoming: true})
	url := "https://" + srv.Addr() + "/v1/health"
	client := func(f testcerts.Files) *http.Client {
		c := tlsClient(t, first.CACert, f.ClientCert, f.ClientKey)
		c.Transport.(*http.Transport).DisableKeepAlives = true
		return c
	}
	if code, err := get(client(first), url); err != nil || code != 200 {
		t.Fatalf("client of the first CA: %d %v", code, err)
	}
	if _, err := get(client(second), url); err == nil {
		t.Fatal("a client of another CA was let in")
	}
	install(second.CACert)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, err := get(client(second), url); err != nil || code != 200 {
		t.Fatalf("client of the new CA after the reload: %d %v", code, err)
	}
	if _, err := get(client(first), url); err == nil {
		t.Fatal("a client of the old CA is still let in")
	}
	if err := os.WriteFile(caFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err == nil {
		t.Fatal("a CA file without a certificate was accepted")
	}
	if code, err := get(client(second), url); err != nil || code != 200 {
		t.Fatalf("after a refused reload: %d %v", code, err)
	}
}
