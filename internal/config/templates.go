package config

import (
	"maps"
	"slices"
	"strconv"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/tmpl"
)

// This file holds the dynamic values of terraform_provider blocks (CTS
// syntax, package tmpl): {{ env "NAME" }}, {{ key "path" }} and
// {{ with secret "path" }}...{{ end }}.
//
// Load checks their syntax and resolves blocks that use only {{ env }} at
// once. A block with at least one {{ key }} or {{ with secret }} keeps
// every string as written (NeedsResolution), with where each was written,
// until package resolve, which reads Consul and Vault at start-up, renders
// the whole block in one pass (RenderStrings): a resolved value is never
// parsed again, so a value that itself looks like a template stays plain
// text.

// resolveBody renders every string of a provider body. onErr is called with
// the field path (relative to the block) and where it was written.
func resolveBody(b ProviderBody, render func(string) (string, error), path string, onErr func(field string, rng *hcl.Range, err error)) ProviderBody {
	out := ProviderBody{Attrs: make(map[string]cty.Value, len(b.Attrs))}
	for _, name := range sortedNames(b.Attrs) {
		v, err := tmpl.MapStrings(b.Attrs[name], render)
		if err != nil {
			var rng *hcl.Range
			if r, ok := b.rng[name]; ok {
				rng = &r
			}
			onErr(join(path, name), rng, err)
			continue
		}
		out.Attrs[name] = v
	}
	for _, nb := range b.Blocks {
		nb.Body = resolveBody(nb.Body, render, join(path, nb.Type), onErr)
		out.Blocks = append(out.Blocks, nb)
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// RenderStrings returns the block with render applied to every string
// value: its arguments, nested blocks and task_env. Each problem is
// reported through onErr with the field path (relative to the block) and,
// when known, where the value was written; the field keeps its value as
// written. The result no longer needs resolution.
func (p Provider) RenderStrings(render func(string) (string, error), onErr func(field string, rng *hcl.Range, err error)) Provider {
	p.Args = resolveBody(p.Args, render, "", onErr)
	if p.TaskEnv != nil {
		env := make(map[string]string, len(p.TaskEnv))
		for _, k := range sortedNames(p.TaskEnv) {
			s, err := render(p.TaskEnv[k])
			if err != nil {
				var rng *hcl.Range
				if r, ok := p.taskEnvRng[k]; ok {
					rng = &r
				}
				onErr("task_env."+k, rng, err)
				continue
			}
			env[k] = s
		}
		p.TaskEnv = env
	}
	p.pending = false
	p.taskEnvRng = nil
	return p
}

// NeedsResolution reports whether the block still holds {{ key }} or
// {{ with secret }} templates, i.e. it has not been resolved by
// package resolve (or is waiting for Vault).
func (p *Provider) NeedsResolution() bool { return p.pending }

// AsWritten returns the block as written, kept once a block with
// {{ with secret }} is resolved (WithTemplate), so that it can be resolved
// again when a secret changes; ok is false for any other block.
func (p *Provider) AsWritten() (Provider, bool) {
	if p.tmpl == nil {
		return Provider{}, false
	}
	return *p.tmpl, true
}

// WithTemplate returns the resolved block p remembering the block as
// written (asWritten) and the tmpl.SecretKey of each Vault secret it read
// (sorted), for SecretKeys and AsWritten.
func (p Provider) WithTemplate(asWritten Provider, secretKeys []string) Provider {
	p.tmpl = &asWritten
	p.secrets = slices.Clone(secretKeys)
	return p
}

// BlockField is how a provider block is written in field paths:
// terraform_provider "name".
func (p *Provider) BlockField() string { return blockName(*p) }

// blockName is how a provider block is written in field paths.
func blockName(p Provider) string {
	return "terraform_provider " + strconv.Quote(p.Name)
}
