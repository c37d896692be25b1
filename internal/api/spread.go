package api

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"
)

// SpreadCluster is implemented by a Cluster that may run in spread mode
// (high_availability.cluster.spread_tasks): every member serves the API,
// and a task's writes are carried out by the member that owns the task.
type SpreadCluster interface {
	Cluster
	// Spread reports whether spread mode is on.
	Spread() bool
	// Self is this instance's id.
	Self() string
	// Owner returns the member that owns a task now (for a task that does
	// not exist yet: the member the assignment gives it to): its id and
	// advertised address, self when it is this instance, ok false when no
	// member owns it right now (it is moving after a member failed).
	Owner(task string) (id, address string, self, ok bool)
	// Holder returns the member holding a task's key now ("" none).
	Holder(task string) string
}

// Headers of spread mode.
const (
	// OwnerHeader carries the owner's address (or its id when it
	// advertises none) on an answer about a task owned elsewhere.
	OwnerHeader = "X-Ctsync-Owner"
	// ForwardedHeader is set (to the forwarding member's id) on a request
	// a member forwarded to a task's owner; the owner never forwards it
	// again.
	ForwardedHeader = "X-Ctsync-Forwarded-By"
)

// spreadCluster returns the cluster when spread mode is on.
func (s *Server) spreadCluster() (SpreadCluster, bool) {
	sc, ok := s.opts.Cluster.(SpreadCluster)
	if !ok || !sc.Spread() {
		return nil, false
	}
	return sc, true
}

// spreadGate is clusterGate in spread mode: every member answers reads
// itself (each keeps every task, and the state of those it does not own
// is its copy of the cluster's, refreshed from Consul within seconds); a
// write of a task (create, enable/disable, run, delete) owned by another
// member is forwarded to that member, whose answer is returned as is; so
// is a read of the task's held plan, which the owner holds.
func (s *Server) spreadGate(sc SpreadCluster, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, write := taskOfWrite(r)
		if !write {
			next.ServeHTTP(w, r)
			return
		}
		if name == "" {
			next.ServeHTTP(w, r) // unreadable: the handler says what is wrong
			return
		}
		id, addr, self, ok := sc.Owner(name)
		switch {
		case self:
			next.ServeHTTP(w, r)
		case !ok:
			w.Header().Set("Retry-After", "5")
			writeError(w, r, http.StatusServiceUnavailable,
				fmt.Sprintf("task '%s' has no owner right now (a member left or failed; another one takes the task over within the session TTL): retry", name))
		case r.Header.Get(ForwardedHeader) != "":
			// The forwarding member and this one disagree about the owner
			// (a member joined or left a moment ago): no second hop.
			w.Header().Set("Retry-After", "1")
			writeError(w, r, http.StatusServiceUnavailable,
				fmt.Sprintf("task '%s' is moving to member '%s': retry", name, id))
		case addr == "":
			w.Header().Set(OwnerHeader, id)
			writeError(w, r, http.StatusBadRequest, fmt.Sprintf("redirect requests to owner '%s'", id))
		default:
			s.forward(w, r, sc.Self(), id, addr)
		}
	})
}

// taskOfWrite returns the task a request writes, or whose owner alone
// answers it: the {name} of PATCH and DELETE /v1/tasks/{name}, POST
// /v1/tasks/{name}/run, GET /v1/tasks/{name}/plan and POST
// /v1/tasks/{name}/plan/{id}/approve|reject, the task.name of POST
// /v1/tasks' body (left readable for the handler). write is false for
// every other request.
func taskOfWrite(r *http.Request) (name string, write bool) {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && (p == "/v1/tasks" || p == "/v1/tasks/"):
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
		if err != nil {
			return "", true
		}
		var req struct {
			Task struct {
				Name string `json:"name"`
			} `json:"task"`
		}
		_ = json.Unmarshal(b, &req)
		return req.Task.Name, true
	case r.Method == http.MethodPatch || r.Method == http.MethodDelete:
		rest, ok := strings.CutPrefix(p, "/v1/tasks/")
		if !ok || rest == "" || strings.Contains(rest, "/") {
			return "", false
		}
		name, err := url.PathUnescape(rest)
		return name, err == nil
	case r.Method == http.MethodPost:
		rest, ok := strings.CutPrefix(p, "/v1/tasks/")
		if !ok {
			return "", false
		}
		n, ok := strings.CutSuffix(rest, "/run")
		if !ok {
			n, ok = planDecision(rest)
		}
		if !ok || n == "" || strings.Contains(n, "/") {
			return "", false
		}
		name, err := url.PathUnescape(n)
		return name, err == nil
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		// The held plan is the owner's (it holds the plan file): read
		// there too.
		rest, ok := strings.CutPrefix(p, "/v1/tasks/")
		if !ok {
			return "", false
		}
		n, ok := strings.CutSuffix(rest, "/plan")
		if !ok || n == "" || strings.Contains(n, "/") {
			return "", false
		}
		name, err := url.PathUnescape(n)
		return name, err == nil
	}
	return "", false
}

// planDecision returns the task of "<name>/plan/<id>/approve" or
// ".../reject".
func planDecision(rest string) (name string, ok bool) {
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[1] != "plan" || parts[2] == "" || (parts[3] != "approve" && parts[3] != "reject") {
		return "", false
	}
	return parts[0], true
}

// forwardTimeout bounds a forwarded request: a run=now apply may take as
// long as Terraform does.
const forwardTimeout = 30 * time.Minute

// forward sends r to the owner at addr (host:port, or a URL) and copies its
// answer. The request keeps its headers (the token: the owner checks it
// again) and gets ForwardedHeader. With TLS on this instance's API, the
// owner is reached with TLS too, verified with tls.ca_cert (or the system's
// roots), presenting this instance's certificate (for verify_incoming).
func (s *Server) forward(w http.ResponseWriter, r *http.Request, self, owner, addr string) {
	target, err := s.ownerURL(addr)
	if err != nil {
		writeError(w, r, http.StatusBadGateway, fmt.Sprintf("task owner '%s' has an unusable address %q: %v", owner, addr, err))
		return
	}
	tr, err := s.forwardTransport()
	if err != nil {
		writeError(w, r, http.StatusBadGateway, "forwarding to the task's owner: "+err.Error())
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Set(ForwardedHeader, self)
			// This member checked the browser's origin already (the
			// guard runs first); to the owner the request comes from
			// this member, not from a page of another origin.
			for _, h := range []string{"Origin", "Referer", "Sec-Fetch-Site", "Sec-Fetch-Mode", "Sec-Fetch-Dest"} {
				pr.Out.Header.Del(h)
			}
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Warn("forwarding a request to the task's owner failed", "owner", owner, "address", addr, "error", err)
			w.Header().Set(OwnerHeader, addr)
			writeError(w, r, http.StatusBadGateway, fmt.Sprintf("forwarding to the task's owner '%s' at %s failed: %v", owner, addr, err))
		},
	}
	s.log.Debug("forwarding a task write to its owner", "method", r.Method, "path", r.URL.Path, "owner", owner, "request_id", requestID(r))
	w.Header().Set(OwnerHeader, addr)
	rp.ServeHTTP(w, r)
}

func (s *Server) ownerURL(addr string) (*url.URL, error) {
	if strings.Contains(addr, "://") {
		return url.Parse(addr)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, err
	}
	scheme := "http"
	if s.opts.TLS.Enabled {
		scheme = "https"
	}
	return &url.URL{Scheme: scheme, Host: addr}, nil
}

func (s *Server) forwardTransport() (http.RoundTripper, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = forwardTimeout
	if !s.opts.TLS.Enabled {
		return tr, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := s.opts.TLS.CACert; ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("tls.ca_cert holds no certificate")
		}
		tc.RootCAs = pool
	}
	if s.opts.TLS.Cert != "" && s.opts.TLS.Key != "" {
		cert, err := tls.LoadX509KeyPair(s.opts.TLS.Cert, s.opts.TLS.Key)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	tr.TLSClientConfig = tc
	return tr, nil
}
