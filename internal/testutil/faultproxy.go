package testutil

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// FaultProxy is a TCP proxy on 127.0.0.1 in front of another address (a
// Consul agent), whose link can be cut and restored to simulate a network
// partition between one client and the server.
type FaultProxy struct {
	// Addr is host:port to point the client at.
	Addr string

	target string
	ln     net.Listener

	mu    sync.Mutex
	mode  int                   // linkUp, linkBlackhole, linkRefuse or linkDrop
	delay time.Duration         // Slow: added before each forwarded chunk
	conns map[net.Conn]struct{} // both ends of every forwarded connection
	// dropped are the forwarded connections that lost bytes (Drop): their
	// streams are broken, so Restore closes them.
	dropped map[net.Conn]struct{}
	held    []net.Conn // accepted while blackholed
	closed  bool
	wg      sync.WaitGroup
	// counting: the HTTP requests forwarded to the target are counted
	// (CountRequests), by "METHOD /path" (no query).
	counting bool
	requests map[string]int
}

const (
	linkUp = iota
	linkBlackhole
	linkRefuse
	linkDrop
)

// StartFaultProxy listens on 127.0.0.1:0 and forwards every connection to
// target. It is closed when the test ends.
func StartFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	p := &FaultProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, dropped: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *FaultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			c.Close()
			return
		case p.mode == linkRefuse:
			p.mu.Unlock()
			c.Close()
			continue
		case p.mode == linkBlackhole || p.mode == linkDrop:
			// Accepted and never answered: the client waits for its own
			// timeout, as with packets lost in a partition.
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *FaultProxy) forward(c net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.mode != linkUp || p.closed {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	var reqs *io.PipeWriter // the client's forwarded bytes, parsed as HTTP requests
	if p.counting {
		var pr *io.PipeReader
		pr, reqs = io.Pipe()
		p.wg.Add(1)
		go p.countRequests(pr)
	}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				drop := p.mode == linkDrop
				if drop {
					p.dropped[c] = struct{}{}
				}
				delay := p.delay
				p.mu.Unlock()
				if delay > 0 && !drop {
					time.Sleep(delay)
				}
				if !drop {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						break
					}
					if reqs != nil && dst == up {
						_, _ = reqs.Write(buf[:n])
					}
				}
			}
			if err != nil {
				break
			}
		}
		// Half-close would keep a blocking query alive; close both ends.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	if reqs != nil {
		reqs.Close()
	}
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	delete(p.dropped, c)
	p.mu.Unlock()
}

// CountRequests makes the proxy count the HTTP/1.x requests that it
// forwards to the target on connections opened from now on (Requests).
func (p *FaultProxy) CountRequests() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counting = true
	if p.requests == nil {
		p.requests = map[string]int{}
	}
}

// Requests returns how many requests were forwarded so far, by
// "METHOD /path" (the query left out).
func (p *FaultProxy) Requests() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.requests))
	for k, v := range p.requests {
		out[k] = v
	}
	return out
}

// countRequests reads one connection's forwarded client bytes as HTTP
// requests and counts them; whatever it cannot parse is drained.
func (p *FaultProxy) countRequests(r *io.PipeReader) {
	defer p.wg.Done()
	defer func() { _, _ = io.Copy(io.Discard, r) }()
	br := bufio.NewReader(r)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		p.mu.Lock()
		p.requests[req.Method+" "+req.URL.Path]++
		p.mu.Unlock()
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
	}
}

// Drop partitions the link the way a lost route does: open connections stay
// open but every byte on them, both ways, is dropped; new connections are
// accepted and never answered. Clients only notice through their own
// timeouts. Restore heals it.
func (p *FaultProxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = linkDrop
}

// Cut partitions the link: every open connection is dropped and new
// connections are accepted but never answered (a blackhole), until Restore.
func (p *FaultProxy) Cut() { p.cut(linkBlackhole) }

// Refuse is Cut, except that new connections are closed at once (the
// client sees its requests fail immediately instead of timing out).
func (p *FaultProxy) Refuse() { p.cut(linkRefuse) }

func (p *FaultProxy) cut(mode int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
	for c := range p.conns {
		c.Close()
	}
}

// Slow makes the link slow without cutting it: every chunk of bytes read
// from either side waits d before it is forwarded (a congested or distant
// link: each request and each answer arrive d late). Restore or Slow(0)
// makes it fast again.
func (p *FaultProxy) Slow(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Restore heals the link: connections held by the blackhole are closed (as
// a client's TCP stack would eventually give up on them), new ones are
// forwarded again, and a slow link is fast again.
func (p *FaultProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = linkUp
	p.delay = 0
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
	for c := range p.dropped {
		c.Close()
	}
	clear(p.dropped)
}

// IsCut reports whether the link is cut.
func (p *FaultProxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode != linkUp
}

// Close stops the proxy and closes every connection.
func (p *FaultProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
	p.mu.Unlock()
	p.wg.Wait()
}
