package api

import (
	"crypto/sha256"
	"slices"
)

// SetSecret replaces the secret of the token name (a token whose secret is
// read from Vault, when the secret rotates): the old secret stops working
// at once. The secret itself is checked by the caller
// (resolve.SecretField); a secret another token has is refused, as at
// load, and the token keeps its secret. found reports whether the token
// exists.
func (t *Tokens) SetSecret(name, secret string) (found bool, err error) {
	if t == nil {
		return false, nil
	}
	sum := sha256.Sum256([]byte(secret))
	t.mu.Lock()
	defer t.mu.Unlock()
	next := slices.Clone(t.list)
	for i := range next {
		if tk := &next[i]; tk.name == name && tk.file == "" {
			tk.sum, found = sum, true
		}
	}
	if err := sameSecret(next); err != nil {
		return found, err
	}
	t.list = next
	return found, nil
}

// SetTokenSecret replaces the secret of an api_auth token (see
// Tokens.SetSecret).
func (s *Server) SetTokenSecret(name, secret string) (bool, error) {
	return s.tokens.SetSecret(name, secret)
}
