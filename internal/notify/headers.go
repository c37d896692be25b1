package notify

import "maps"

// headers are the headers the sender adds to each request: the block's,
// with the values replaced by SetHeader.
func (s *sender) headers() map[string]string {
	if h := s.hdr.Load(); h != nil {
		return *h
	}
	return s.n.Headers
}

// SetHeader replaces the value of a header of the notifier name (a value
// read from Vault, when the secret rotates); deliveries from then on send
// it. It reports whether the notifier has that header.
func (d *Dispatcher) SetHeader(name, header, value string) bool {
	found := false
	for _, s := range d.list() {
		if s.n.Name != name {
			continue
		}
		s.hdrMu.Lock()
		cur := s.headers()
		if _, ok := cur[header]; ok {
			h := maps.Clone(cur)
			h[header] = value
			s.hdr.Store(&h)
			found = true
		}
		s.hdrMu.Unlock()
	}
	return found
}
