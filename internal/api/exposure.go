package api

import (
	"fmt"
	"net"
	"strings"
)

// ListensBeyondLoopback reports whether a server listening on addr
// (host:port, or a bare host) can be reached from other machines: an empty
// host or an unspecified address (0.0.0.0, ::) listens on every interface,
// and any address that is not a loopback one (127.0.0.0/8, ::1, or the
// name localhost) is reachable through its interface.
func ListensBeyondLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return false
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i] // fe80::1%eth0
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// exposureWarning is the warning of a server that anyone on the network
// may use: it listens beyond loopback and requires no token. Empty
// otherwise.
func (s *Server) exposureWarning(addr string) string {
	if s.tokens.Enabled() || !ListensBeyondLoopback(addr) {
		return ""
	}
	_, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("the API listens beyond loopback (%s) without api_auth: anyone who can reach port %s can create, run and delete tasks, "+
		"and a task runs code as ctsync; add api_auth tokens (see docs/security.md)", addr, port)
}
