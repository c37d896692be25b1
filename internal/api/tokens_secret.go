package api

import "crypto/sha256"

// SetSecret replaces the secret of the token name (a token whose secret is
// read from Vault, when the secret rotates): the old secret stops working
// at once. It reports whether the token exists. The secret is checked by
// the caller (resolve.SecretField).
func (t *Tokens) SetSecret(name, secret string) bool {
	if t == nil {
		return false
	}
	sum := sha256.Sum256([]byte(secret))
	t.mu.Lock()
	defer t.mu.Unlock()
	found := false
	for i := range t.list {
		if tk := &t.list[i]; tk.name == name && tk.file == "" {
			tk.sum, found = sum, true
		}
	}
	return found
}

// SetTokenSecret replaces the secret of an api_auth token (see
// Tokens.SetSecret).
func (s *Server) SetTokenSecret(name, secret string) bool { return s.tokens.SetSecret(name, secret) }
