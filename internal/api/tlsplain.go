package api

import (
	"errors"
	"io"
	"net"
	"time"
)

// plainHTTPResponse is what a plain-HTTP request to the TLS port gets:
// the answer of Go's own HTTPS server (and so of CTS), for every method.
// (net/http answers so only for the methods it recognises in the first
// five bytes; PATCH and DELETE would get a closed connection.)
const plainHTTPResponse = "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"Client sent an HTTP request to an HTTPS server.\n"

var errPlainHTTP = errors.New("plain HTTP request on the TLS port")

// plainHTTPListener hands out connections that answer plain HTTP with a
// 400 instead of failing the TLS handshake silently.
type plainHTTPListener struct{ net.Listener }

func (l plainHTTPListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c}, nil
}

// sniffConn looks at the first byte the client sends: a TLS handshake
// record starts with 0x16, an HTTP request with an upper-case method
// name. It runs in the connection's own goroutine (the handshake's first
// read), never in Accept.
type sniffConn struct {
	net.Conn
	sniffed bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	if c.sniffed || len(p) == 0 {
		return c.Conn.Read(p)
	}
	c.sniffed = true
	n, err := c.Conn.Read(p)
	if n > 0 && p[0] >= 'A' && p[0] <= 'Z' {
		_, _ = io.WriteString(c.Conn, plainHTTPResponse)
		// Half-close and drain what the client still sends, briefly, so
		// that closing does not reset the connection before the client
		// read the answer.
		if tc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
			_ = c.Conn.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = io.Copy(io.Discard, io.LimitReader(c.Conn, 1<<16))
		}
		_ = c.Conn.Close()
		return 0, errPlainHTTP
	}
	return n, err
}
