package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ctsync/ctsync/internal/config"
)

// This file holds the API's access control, applied to every request
// before the handlers (see docs/security.md for the threat model):
//
//   - CORS headers only for the origins of api_http.cors_origins;
//   - a write sent by a browser from another origin is refused (403),
//     with or without tokens: net/http's CrossOriginProtection reads the
//     Sec-Fetch-Site and Origin headers, so scripts and CLIs, which send
//     neither, are not affected;
//   - without tokens, a request whose Host header is not an IP address,
//     localhost, the listen address or an allowed name is refused (403),
//     which defeats DNS rebinding;
//   - with tokens, every request but GET /v1/health and the dashboard's
//     static files needs "Authorization: Bearer <secret>" (401), and a
//     write needs a token with write access (403).

// Token access levels.
const (
	accessNone = iota
	accessRead
	accessWrite
)

// apiToken is a token as the server keeps it: the SHA-256 of its secret,
// so that comparisons take the same time whatever the lengths.
type apiToken struct {
	name   string
	access int
	sum    [sha256.Size]byte
	file   string
}

// Tokens is the set of API tokens; safe for concurrent use. Reload reads
// the secret files again.
type Tokens struct {
	mu   sync.RWMutex
	list []apiToken
}

// NewTokens returns the set of the configured tokens (secrets already
// read by config.Load).
func NewTokens(cfg []config.APIToken) *Tokens {
	t := &Tokens{}
	for _, c := range cfg {
		access := accessRead
		if c.Access == config.AccessWrite {
			access = accessWrite
		}
		t.list = append(t.list, apiToken{name: c.Name, access: access, sum: sha256.Sum256([]byte(c.Secret)), file: c.SecretFile})
	}
	return t
}

// Enabled reports whether tokens are required.
func (t *Tokens) Enabled() bool {
	if t == nil {
		return false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.list) > 0
}

// Reload reads every token's secret_file again and checks the new set as
// config.Load does: each secret valid (config.ReadTokenFile), no two
// tokens with one secret (which would leave a request's access to the
// order of the tokens). It is all or nothing: on any error no token
// changes, and the error names the tokens (never a secret).
func (t *Tokens) Reload() (changed int, err error) {
	next, changed, err := t.readFiles()
	if err != nil {
		return 0, err
	}
	t.commitFiles(next)
	return changed, nil
}

// readFiles returns the secrets of the token files as Reload would set
// them, and how many changed, without changing anything.
func (t *Tokens) readFiles() (next map[string][sha256.Size]byte, changed int, err error) {
	if t == nil {
		return nil, 0, nil
	}
	t.mu.RLock()
	list := slices.Clone(t.list)
	t.mu.RUnlock()
	next = map[string][sha256.Size]byte{}
	var errs []string
	for i := range list {
		tk := &list[i]
		if tk.file == "" {
			continue
		}
		secret, rerr := config.ReadTokenFile(tk.file)
		if rerr != nil {
			errs = append(errs, fmt.Sprintf("token %q: %v", tk.name, rerr))
			continue
		}
		if sum := sha256.Sum256([]byte(secret)); sum != tk.sum {
			tk.sum = sum
			changed++
		}
		next[tk.name] = tk.sum
	}
	if len(errs) == 0 {
		if err := sameSecret(list); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, 0, fmt.Errorf("%s (no token changed: the previous secrets stay in use)", strings.Join(errs, "; "))
	}
	return next, changed, nil
}

// commitFiles sets the secrets readFiles returned.
func (t *Tokens) commitFiles(next map[string][sha256.Size]byte) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.list {
		if sum, ok := next[t.list[i].name]; ok && t.list[i].file != "" {
			t.list[i].sum = sum
		}
	}
}

// unsetSecret is the hash of a token without a secret yet (from Vault, not
// yet read): no request can present it.
var unsetSecret = sha256.Sum256(nil)

// sameSecret returns an error naming two tokens that share a secret.
func sameSecret(list []apiToken) error {
	seen := map[[sha256.Size]byte]string{}
	for _, tk := range list {
		if tk.sum == unsetSecret {
			continue
		}
		if other, dup := seen[tk.sum]; dup {
			return fmt.Errorf("token %q has the same secret as token %q: give each token its own secret", tk.name, other)
		}
		seen[tk.sum] = tk.name
	}
	return nil
}

// lookup returns the token whose secret is given. Every token is compared,
// in constant time, whatever matches.
func (t *Tokens) lookup(secret string) (name string, access int) {
	sum := sha256.Sum256([]byte(secret))
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, tk := range t.list {
		if subtle.ConstantTimeCompare(sum[:], tk.sum[:]) == 1 {
			name, access = tk.name, tk.access
		}
	}
	return name, access
}

// ParseBearer returns the token of an Authorization header value of the
// Bearer scheme ("Bearer <token>", the scheme in any case). ok is false for
// another scheme, an empty token or one with white space or control
// characters.
func ParseBearer(h string) (token string, ok bool) {
	h = strings.TrimSpace(h)
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(rest, " ")
	if token == "" || strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", false
	}
	return token, true
}

const tokenKey ctxKey = iota + 100

// tokenName returns the name of the token the request was authorised
// with, "" without auth.
func tokenName(r *http.Request) string {
	n, _ := r.Context().Value(tokenKey).(string)
	return n
}

// isWrite reports whether a request changes something (or runs code).
func isWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// publicPath reports whether the path is served without a token: the
// health check (Consul's service check calls it) and the dashboard's
// static files (they hold no data; the page asks for a token and sends it
// with every API call).
func publicPath(p string) bool {
	return p == "/v1/health" || p == "/" || p == "/ui" || strings.HasPrefix(p, "/ui/")
}

// guard is the access-control middleware around the mux.
type guard struct {
	log    *slog.Logger
	tokens *Tokens
	cors   []string
	hosts  []string // lower case, besides IPs and localhost
	cop    *http.CrossOriginProtection
}

func newGuard(opts Options, tokens *Tokens, certNames []string) *guard {
	g := &guard{log: opts.Logger, tokens: tokens, cors: opts.HTTP.CORSOrigins, cop: http.NewCrossOriginProtection()}
	for _, o := range opts.HTTP.CORSOrigins {
		// Validated by config; an invalid one cannot be trusted anyway.
		_ = g.cop.AddTrustedOrigin(o)
	}
	addHost := func(h string) {
		h = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), "."))
		if h != "" && !slices.Contains(g.hosts, h) {
			g.hosts = append(g.hosts, h)
		}
	}
	if host, _, err := net.SplitHostPort(opts.Addr); err == nil {
		addHost(host)
	}
	for _, h := range opts.HTTP.AllowedHosts {
		addHost(h)
	}
	for _, h := range certNames {
		addHost(h)
	}
	g.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusForbidden, "cross-origin request refused: a web page of another origin cannot change ctsync "+
			"(a browser sent this request from a page that is not ctsync's own); list the page's origin in api_http.cors_origins to allow it")
	}))
	return g
}

// hostAllowed reports whether a request's Host header may be served
// without a token: an IP address, localhost (or a name under .localhost),
// or a configured name. A browser tricked by DNS rebinding sends the
// attacker's name.
func (g *guard) hostAllowed(hostport string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: not a browser
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	return slices.Contains(g.hosts, host)
}

// cors sets the CORS headers for an allowed origin and answers a
// preflight request. It reports whether the request was answered.
func (g *guard) corsHeaders(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	allowed := origin != "" && slices.Contains(g.cors, origin)
	h := w.Header()
	h.Add("Vary", "Origin")
	if allowed {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Expose-Headers", "X-Request-Id")
	}
	if r.Method != http.MethodOptions {
		return false
	}
	if allowed {
		h.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Ctsync-Client")
		h.Set("Access-Control-Max-Age", "600")
	}
	w.WriteHeader(http.StatusOK) // as CTS: OPTIONS is answered with 200
	return true
}

// wrap returns next behind the access rules.
func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.corsHeaders(w, r) {
			return
		}
		auth := g.tokens.Enabled()
		if !auth && r.URL.Path != "/v1/health" && !g.hostAllowed(r.Host) {
			writeError(w, r, http.StatusForbidden, fmt.Sprintf("host %q is not allowed: requests must name this server by IP address, "+
				"localhost or a name listed in api_http.allowed_hosts (a guard against DNS rebinding while api_auth is off)", r.Host))
			return
		}
		if err := g.cop.Check(r); err != nil {
			g.log.Warn("api: cross-origin write refused", "method", r.Method, "path", r.URL.Path,
				"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"),
				"request_id", requestID(r), "remote", r.RemoteAddr)
			writeError(w, r, http.StatusForbidden, "cross-origin request refused: a web page of another origin cannot change ctsync "+
				"(a browser sent this request from a page that is not ctsync's own); list the page's origin in api_http.cors_origins to allow it")
			return
		}
		if auth && !publicPath(r.URL.Path) {
			secret, ok := ParseBearer(r.Header.Get("Authorization"))
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ctsync"`)
				msg := "missing API token: send the header \"Authorization: Bearer <token>\" (ctsync CLI: -token or CTS_TOKEN)"
				if r.Header.Get("Authorization") != "" {
					msg = "malformed Authorization header: expected \"Bearer <token>\""
				}
				writeError(w, r, http.StatusUnauthorized, msg)
				return
			}
			name, access := g.tokens.lookup(secret)
			switch {
			case access == accessNone:
				w.Header().Set("WWW-Authenticate", `Bearer realm="ctsync", error="invalid_token"`)
				g.log.Warn("api: unknown token refused", "method", r.Method, "path", r.URL.Path,
					"request_id", requestID(r), "remote", r.RemoteAddr)
				writeError(w, r, http.StatusUnauthorized, "unknown API token")
				return
			case isWrite(r) && access < accessWrite:
				g.log.Warn("api: write refused to a read token", "token", name, "method", r.Method, "path", r.URL.Path,
					"request_id", requestID(r), "remote", r.RemoteAddr)
				writeError(w, r, http.StatusForbidden, fmt.Sprintf("token %q has read access: this request needs a token with write access", name))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), tokenKey, name))
		}
		if !isWrite(r) {
			next.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			token := tokenName(r)
			if token == "" {
				token = "(auth off)"
			}
			// The audit line of every write: who (the token's name, never
			// its secret), what and the outcome.
			g.log.Info("api write", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery,
				"status", rec.code(), "token", token, "remote", r.RemoteAddr, "request_id", requestID(r),
				"duration", time.Since(start).Round(time.Millisecond))
		}()
		next.ServeHTTP(rec, r)
	})
}
