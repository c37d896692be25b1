package config

import "github.com/hashicorp/hcl/v2"

// rawClientTLS is a client tls { enabled, verify, ca_cert, ca_path, cert,
// key, server_name } block as written: consul, vault and the
// terraform-cloud driver each have one. Embedded, its fields read as the
// embedding block's own.
type rawClientTLS struct {
	tlsEnabled, tlsVerify                 opt[bool]
	caCert, caPath, cert, key, serverName opt[string]
}

// clientTLS decodes a client tls block at path (e.g. "consul.tls") into r.
func (d *decoder) clientTLS(b *hcl.Block, path string, r *rawClientTLS) {
	c := d.content(b.Body, path, attrs("enabled", "verify", "ca_cert", "ca_path", "cert", "key", "server_name"), nil)
	r.tlsEnabled.merge(d.boolean(c, "enabled", path))
	r.tlsVerify.merge(d.boolean(c, "verify", path))
	r.caCert.merge(d.str(c, "ca_cert", path))
	r.caPath.merge(d.str(c, "ca_path", path))
	r.cert.merge(d.str(c, "cert", path))
	r.key.merge(d.str(c, "key", path))
	r.serverName.merge(d.str(c, "server_name", path))
}
