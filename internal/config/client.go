package config

import "strings"

// Client types (client_type, and start's -client-type flag).
const (
	// ClientTerraform runs Terraform (the default; "" means it too).
	ClientTerraform = "terraform"
	// ClientDevelopment runs no Terraform: each run is logged with its
	// inputs (CTS's development client).
	ClientDevelopment = "development"
)

// decodeClientType reads client_type.
func (d *decoder) decodeClientType(c *content, r *rawConfig) {
	s := d.str(c, "client_type", "")
	if !s.Set {
		return
	}
	switch v := strings.ToLower(strings.TrimSpace(s.V)); v {
	case "", ClientTerraform, ClientDevelopment:
		s.V = v
		r.clientType.merge(s)
	case "test":
		d.errf(s.Rng, "client_type", `"test" is CTS's internal mock client; use "development" to run without Terraform`)
	default:
		d.errf(s.Rng, "client_type", "%q is not a client type (use %q or %q)", s.V, ClientTerraform, ClientDevelopment)
	}
}
