package config

import "github.com/ctsync/ctsync/internal/tmpl"

// This file holds what a provider block knows of its {{ with secret }}
// templates (Vault secrets, rendered by package resolve).

// SecretKeys returns the tmpl.SecretKey of every Vault secret the resolved block
// read, sorted; nil for a block without {{ with secret }}.
func (p *Provider) SecretKeys() []string { return p.secrets }

// UsesVault reports whether the block holds {{ with secret }} templates
// (resolved or not).
func (p *Provider) UsesVault() bool {
	if p.tmpl != nil {
		return true
	}
	found := false
	check := func(s string) { found = found || tmpl.UsesSecret(s) }
	var body func(b *ProviderBody)
	body = func(b *ProviderBody) {
		for _, v := range b.Attrs {
			walkStrings(v, check)
		}
		for i := range b.Blocks {
			body(&b.Blocks[i].Body)
		}
	}
	body(&p.Args)
	for _, v := range p.TaskEnv {
		check(v)
	}
	return found
}
