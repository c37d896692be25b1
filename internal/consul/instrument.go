package consul

import "net/http"

// WrapTransport wraps the HTTP transport used for every request of the
// client (the API library's and BlockingGet's share one *http.Client), for
// instance to measure requests. Call it before the client is used.
func (c *Client) WrapTransport(wrap func(http.RoundTripper) http.RoundTripper) {
	rt := c.http.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.http.Transport = wrap(rt)
}
