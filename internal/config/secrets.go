package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// This file holds what {{ with secret "path" }}...{{ end }} templates see:
// a Vault secret, read through a SecretReader (package vault implements
// one with the official client).

// Secret is a Vault secret as a template sees it: {{ .Data.data.key }} for
// KV version 2, {{ .Data.key }} for KV version 1 and most dynamic secrets,
// and {{ .LeaseID }}, {{ .LeaseDuration }}, {{ .Renewable }}.
type Secret struct {
	RequestID     string
	LeaseID       string
	LeaseDuration int
	Renewable     bool
	Data          map[string]any
	Warnings      []string
}

// SecretReader reads a Vault secret for {{ with secret "path" "k=v" ... }}:
// with "k=v" arguments it writes them to path and returns the answer (as
// CTS does, e.g. to issue a certificate), otherwise it reads path. An error
// that wraps ErrVaultUnavailable means Vault could not be reached (or
// answered 5xx): resolution waits for it instead of failing. A nil secret
// without an error means there is none at path.
type SecretReader func(ctx context.Context, path string, params []string) (*Secret, error)

// ErrVaultUnavailable marks errors of a Vault that cannot be reached.
var ErrVaultUnavailable = errors.New("vault is unavailable")

// errMissingVault is CTS's error for secrets without a vault block.
var errMissingVault = errors.New("detected dynamic configuration using Vault: missing Vault configuration")

// SecretKey identifies a secret request: its path and arguments.
func SecretKey(path string, params []string) string {
	if len(params) == 0 {
		return path
	}
	return path + "\x00" + strings.Join(params, "\x00")
}

// SplitSecretKey is the inverse of SecretKey.
func SplitSecretKey(key string) (path string, params []string) {
	parts := strings.Split(key, "\x00")
	return parts[0], parts[1:]
}

// SecretKeys returns the SecretKey of every Vault secret the resolved block
// read, sorted; nil for a block without {{ with secret }}.
func (p *Provider) SecretKeys() []string { return p.secrets }

// UsesVault reports whether the block holds {{ with secret }} templates
// (resolved or not).
func (p *Provider) UsesVault() bool {
	if p.tmpl != nil {
		return true
	}
	found := false
	check := func(s string) { found = found || hasKind(s, partSecret) }
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

// secretScope is the secret of an enclosing {{ with secret }}.
type secretScope struct {
	path string
	s    *Secret
}

// field renders {{ .A.b.c }} against the secret. It never quotes a value in
// its errors.
func (sc *secretScope) field(names []string) (string, error) {
	where := func(n int) string { return "." + strings.Join(names[:n], ".") }
	var cur any
	switch names[0] {
	case "Data":
		cur = sc.s.Data
	case "LeaseID":
		cur = sc.s.LeaseID
	case "LeaseDuration":
		cur = sc.s.LeaseDuration
	case "Renewable":
		cur = sc.s.Renewable
	case "RequestID":
		cur = sc.s.RequestID
	case "Warnings":
		cur = sc.s.Warnings
	default:
		return "", fmt.Errorf("secret %q: %s is not a field of a secret (use .Data, .LeaseID, .LeaseDuration or .Renewable)", sc.path, where(1))
	}
	for i, n := range names[1:] {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", fmt.Errorf("secret %q: %s is not a map", sc.path, where(i+1))
		}
		v, ok := m[n]
		if !ok {
			return "", fmt.Errorf("secret %q has no value at %s", sc.path, where(i+2))
		}
		cur = v
	}
	switch v := cur.(type) {
	case nil:
		return "", fmt.Errorf("secret %q has no value at %s", sc.path, where(len(names)))
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("secret %q: the value at %s cannot be written as text", sc.path, where(len(names)))
		}
		return string(b), nil
	}
}
