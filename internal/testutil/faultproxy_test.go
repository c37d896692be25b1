package testutil

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line and waits up to d for it to come back.
func roundTrip(c net.Conn, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

func TestFaultProxy(t *testing.T) {
	p := StartFaultProxy(t, echoServer(t))
	c1, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if err := roundTrip(c1, Scale(time.Second)); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	p.Cut()
	if !p.IsCut() {
		t.Fatal("IsCut after Cut")
	}
	if err := roundTrip(c1, Scale(time.Second)); err == nil {
		t.Fatal("an open connection survived Cut")
	}
	c2, err := net.Dial("tcp", p.Addr) // accepted by the blackhole
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(c2, 200*time.Millisecond); err == nil {
		t.Fatal("a new connection was answered while cut")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("blackhole: want a timeout, got %v", err)
	}

	p.Refuse()
	c3, err := net.Dial("tcp", p.Addr)
	if err == nil {
		if err := roundTrip(c3, Scale(time.Second)); err == nil || isTimeout(err) {
			t.Fatalf("refuse: want the connection closed at once, got %v", err)
		}
		c3.Close()
	}

	p.Restore()
	c4, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	if err := roundTrip(c4, Scale(time.Second)); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// Drop keeps open connections open but loses their bytes; Restore closes
// them (their streams are broken) and forwards again.
func TestFaultProxyDrop(t *testing.T) {
	p := StartFaultProxy(t, echoServer(t))
	c1, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if err := roundTrip(c1, Scale(time.Second)); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Drop()
	if !p.IsCut() {
		t.Fatal("IsCut after Drop")
	}
	if err := roundTrip(c1, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("an open connection while dropping: want a timeout, got %v", err)
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(c2, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a new connection while dropping: want a timeout, got %v", err)
	}
	p.Restore()
	if err := roundTrip(c1, Scale(time.Second)); err == nil || isTimeout(err) {
		t.Fatalf("a connection that lost bytes after Restore: want it closed, got %v", err)
	}
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3, Scale(time.Second)); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

// CountRequests counts the HTTP requests forwarded, on kept-alive
// connections and with bodies, by method and path.
func TestFaultProxyCountRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	p := StartFaultProxy(t, srv.Listener.Addr().String())
	p.CountRequests()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	do := func(method, path, body string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+p.Addr+path, strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for range 3 {
		do("GET", "/v1/kv/a?recurse&index=7", "")
	}
	do("PUT", "/v1/txn", strings.Repeat(`[{"KV":{"Verb":"set"}}]`, 3000)) // a body over several reads
	do("PUT", "/v1/session/renew/x", "")
	want := map[string]int{"GET /v1/kv/a": 3, "PUT /v1/txn": 1, "PUT /v1/session/renew/x": 1}
	var got map[string]int
	Eventually(t, 5*time.Second, "the requests counted", func() bool {
		got = p.Requests()
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
}

// Slow delays every forwarded chunk both ways (a round trip takes at least
// twice the delay) without breaking the connection; Restore makes it fast.
func TestFaultProxySlow(t *testing.T) {
	p := StartFaultProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, Scale(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// A delay well above a loaded machine's scheduling delays, so that
	// "fast again" can be told from "slow" with room on both sides.
	const delay = 500 * time.Millisecond
	p.Slow(delay)
	start := time.Now()
	if err := roundTrip(c, Scale(5*time.Second)); err != nil {
		t.Fatalf("slow link broke the connection: %v", err)
	}
	if d := time.Since(start); d < 2*delay {
		t.Fatalf("round trip over the slow link took %s, want >= %s", d, 2*delay)
	}
	p.Restore()
	start = time.Now()
	if err := roundTrip(c, Scale(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= delay {
		t.Fatalf("round trip after Restore took %s: still slow", d)
	}
}
