package config

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ctsync/ctsync/internal/task"
)

// CheckLocalModules checks that the local module folder ("./x", "../x" or
// an absolute path, resolved against the directory ctsync runs in, as CTS
// does) of every task exists, as a task created through the API is checked
// at submission. It is not part of Load: a configuration can be read where
// its modules are not (tests, `ctsync` subcommands that only read it). Each
// problem names the file and line of the task's module.
func (c *Config) CheckLocalModules() error {
	var errs Errors
	for _, s := range c.Tasks {
		err := task.CheckLocalModule(s.Module)
		if err == nil {
			continue
		}
		rng, ok := c.Ranges["task."+s.Name+".module"]
		if !ok {
			rng = c.Ranges["task."+s.Name]
		}
		msg := err.Error()
		if wd, werr := os.Getwd(); werr == nil && !filepath.IsAbs(s.Module) {
			msg += fmt.Sprintf(" (a relative path is resolved against the directory ctsync runs in, %s)", wd)
		}
		errs = append(errs, &Error{Range: rng, Field: fmt.Sprintf("task %q.module", s.Name), Msg: msg})
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}
