package cli

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A SIGHUP reload tells systemd RELOADING=1, then READY=1 with its
// outcome: a refused reload (a token file that became invalid) says that
// it was refused and that what is in force stays; a good one says
// reloaded. The test plays systemd on NOTIFY_SOCKET.
func TestReloadStatusForSystemd(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	next := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		if err := conn.SetReadDeadline(time.Now().Add(testutil.Scale(10 * time.Second))); err != nil {
			t.Fatal(err)
		}
		n, _, err := conn.ReadFromUnix(buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}

	tokenFile := filepath.Join(dir, "ops.token")
	const secret = "ops-secret-0123456789"
	if err := os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := ctsapi.New(ctsapi.Options{Controller: newFakeCtrl(), Tokens: []config.APIToken{
		{Name: "ops", Secret: secret, SecretFile: tokenFile, Access: config.AccessWrite}}})
	if err != nil {
		t.Fatal(err)
	}
	a := &app{log: slog.New(slog.DiscardHandler)}

	if err := os.WriteFile(tokenFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.reload(t.Context(), srv, true)
	if m := next(); !strings.HasPrefix(m, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("first notification %q, want RELOADING=1", m)
	}
	if m := next(); !strings.HasPrefix(m, "READY=1\nSTATUS=reload refused: ") || !strings.Contains(m, `token "ops"`) {
		t.Fatalf("after a refused reload: %q", m)
	}

	if err := os.WriteFile(tokenFile, []byte("ops-secret-new-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.reload(t.Context(), srv, true)
	next()
	if m := next(); m != "READY=1\nSTATUS=reloaded" {
		t.Fatalf("after a reload: %q", m)
	}
}
