package api

import (
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/task"
)

// Live are the settings of a running server that a reload of the
// configuration (SIGHUP) changes: the api_auth tokens, the api_tasks
// allowlist and the global buffer period that tasks created through the
// API inherit.
type Live struct {
	// Tokens, when SetTokens, replace the api_auth tokens.
	Tokens    []config.APIToken
	SetTokens bool
	Tasks     config.APITasks
	// BufferPeriod is the global buffer period.
	BufferPeriod task.BufferPeriod
	// LogDirs, when not nil, replace Options.LogDirs (the tasks of the
	// files may have working directories of their own).
	LogDirs []string
}

// SetLive puts l in force for the requests that start from now on.
func (s *Server) SetLive(l Live) {
	s.liveMu.Lock()
	s.opts.Tasks = l.Tasks
	s.opts.BufferPeriod = l.BufferPeriod
	if l.LogDirs != nil {
		s.opts.LogDirs = l.LogDirs
	}
	s.liveMu.Unlock()
	if l.SetTokens {
		s.tokens.set(l.Tokens)
	}
}

// apiTasks is the api_tasks block in force.
func (s *Server) apiTasks() config.APITasks {
	s.liveMu.RLock()
	defer s.liveMu.RUnlock()
	return s.opts.Tasks
}

// logDirs are the directories whose run logs are served.
func (s *Server) logDirs() []string {
	s.liveMu.RLock()
	defer s.liveMu.RUnlock()
	return s.opts.LogDirs
}

// bufferPeriod is the global buffer period in force.
func (s *Server) bufferPeriod() task.BufferPeriod {
	s.liveMu.RLock()
	defer s.liveMu.RUnlock()
	return s.opts.BufferPeriod
}

// set replaces the tokens with cfg.
func (t *Tokens) set(cfg []config.APIToken) {
	next := NewTokens(cfg)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.list = next.list
}
