package cli

import (
	"bytes"
	"log/syslog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/testutil"
)

func TestSyslogLines(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "log.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	old := syslogDial
	syslogDial = func(p syslog.Priority, tag string) (*syslog.Writer, error) {
		return syslog.Dial("unixgram", sock, p, tag)
	}
	defer func() { syslogDial = old }()

	cfg := &config.Config{LogLevel: "INFO", LogFormat: "json",
		Syslog: config.Syslog{Enabled: true, Facility: "LOCAL3", Name: "ctsync-test"}}
	var console bytes.Buffer
	log := newLogger(cfg, &console).With("component", "test")
	log.Warn("hello syslog", "task", "web")
	log.Debug("not at INFO")
	log.Warn("after the debug line") // what comes next instead of it

	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(conn.SetReadDeadline(time.Now().Add(testutil.Scale(10 * time.Second))))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	must(err)
	line := string(buf[:n])
	// <priority>: LOCAL3 (19) * 8 + warning (4) = 156.
	for _, want := range []string{"<156>", "ctsync-test[", "]: [WARN]  test: hello syslog: task=web\n"} {
		if !strings.Contains(line, want) {
			t.Errorf("syslog line %q lacks %q", line, want)
		}
	}
	if !strings.Contains(console.String(), `"msg":"hello syslog"`) {
		t.Errorf("console: %s", console.String())
	}
	// The next datagram is the WARN line logged after the DEBUG one (a
	// datagram socket keeps the order): the DEBUG line was not sent.
	n, err = conn.Read(buf)
	must(err)
	if next := string(buf[:n]); !strings.Contains(next, "after the debug line") {
		t.Errorf("a DEBUG line reached syslog at INFO: %q", next)
	}
}
