package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// The API's listen address (ctsync extension): address = "<ip>:<port>",
// "<ip>" or ":<port>". CTS has only port, which listens on every
// interface; port still does, and with a bare address it gives the port.
// An address with a port and a port that says another one is an error.

// decodeAddress reads the top-level address into r.
func (d *decoder) decodeAddress(c *content, r *rawConfig) {
	s := d.str(c, "address", "")
	if !s.Set {
		return
	}
	if _, _, _, err := ParseListenAddress(s.V); err != nil {
		d.errf(s.Rng, "address", "%v", err)
		return
	}
	r.address.merge(s)
}

// finishAddress sets cfg.Address and cfg.Port from address and port.
func (d *decoder) finishAddress(r *rawConfig, cfg *Config) {
	cfg.Port = r.port.or(DefaultPort)
	host := ""
	if r.address.Set {
		h, port, hasPort, _ := ParseListenAddress(r.address.V) // checked by decodeAddress
		host = h
		if hasPort {
			if r.port.Set && r.port.V != port {
				d.errf(r.address.Rng, "address", "%q listens on port %d, but port = %d (%s): set the port in one place",
					r.address.V, port, r.port.V, posString(r.port.Rng))
			}
			cfg.Port = port
		}
	}
	cfg.Address = net.JoinHostPort(host, strconv.Itoa(cfg.Port))
}

// ParseListenAddress parses the API's listen address: an IP address with a
// port ("127.0.0.1:8558", "[::1]:8558"), an IP address alone ("127.0.0.1",
// "::1", "[::1]"), or a port alone (":8558", every interface). The host
// is "" for every interface; hasPort says whether a port was given.
func ParseListenAddress(s string) (host string, port int, hasPort bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", 0, false, fmt.Errorf(`is empty: give an IP address and port ("127.0.0.1:8558"), an IP address ("0.0.0.0" for every interface) or leave it out`)
	}
	h, p, splitErr := net.SplitHostPort(s)
	if splitErr == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return "", 0, false, fmt.Errorf("%q: the port %q must be a number between 0 and 65535", s, p)
		}
		port, hasPort = n, true
		if h == "" {
			return "", port, true, nil // ":8558": every interface
		}
	} else {
		h = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	}
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return "", 0, false, fmt.Errorf(`%q is not an IP address with an optional port: use for example "127.0.0.1:8558", "[::1]:8558" or "0.0.0.0" (a host name is not accepted; "127.0.0.1" is loopback)`, s)
	}
	return ip.String(), port, hasPort, nil
}

// ListenAddress is the address the API listens on: Address, or every
// interface on Port when Address is not set (a Config not made by Load).
func (c *Config) ListenAddress() string {
	if c.Address != "" {
		return c.Address
	}
	return net.JoinHostPort("", strconv.Itoa(c.Port))
}
