package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// address is read alike from HCL 2, CTS's HCL 1 and JSON: an IP address
// and port, an IP address alone (port, or 8558, gives the port), or a port
// alone (every interface); without it, port listens on every interface,
// as in CTS.
func TestListenAddress(t *testing.T) {
	clearConsulEnv(t)
	for _, c := range []struct {
		name, file, addr string
		port             int
	}{
		{"none.hcl", `log_level = "INFO"`, ":8558", 8558},
		{"port.hcl", `port = 9000`, ":9000", 9000},
		{"full.hcl", `address = "127.0.0.1:9001"`, "127.0.0.1:9001", 9001},
		{"host.hcl", `address = "127.0.0.2"`, "127.0.0.2:8558", 8558},
		{"hostport.hcl", "address = \"127.0.0.2\"\nport = 9002", "127.0.0.2:9002", 9002},
		{"same.hcl", "address = \"10.1.2.3:9003\"\nport = 9003", "10.1.2.3:9003", 9003},
		{"any.hcl", `address = "0.0.0.0:9004"`, "0.0.0.0:9004", 9004},
		{"portonly.hcl", `address = ":9005"`, ":9005", 9005},
		{"v6.hcl", `address = "[::1]:9006"`, "[::1]:9006", 9006},
		{"v6bare.hcl", `address = "::1"`, "[::1]:8558", 8558},
		{"v6brackets.hcl", `address = "[::1]"`, "[::1]:8558", 8558},
		{"zone.hcl", `address = "[fe80::1%eth0]:9007"`, "[fe80::1%eth0]:9007", 9007},
		{"space.hcl", `address = " 127.0.0.1:9008 "`, "127.0.0.1:9008", 9008},
		{"zero.hcl", `address = "127.0.0.1:0"`, "127.0.0.1:0", 0},
		// HCL 1 only: two arguments on one line, separated by a comma.
		{"hcl1.hcl", `log_level = "INFO", address = "127.0.0.3:9009"`, "127.0.0.3:9009", 9009},
		{"json.json", `{"address": "127.0.0.4:9010"}`, "127.0.0.4:9010", 9010},
		{"jsonport.json", `{"address": "127.0.0.4", "port": 9011}`, "127.0.0.4:9011", 9011},
	} {
		cfg := mustLoad(t, writeFile(t, t.TempDir(), c.name, c.file))
		if cfg.Address != c.addr || cfg.Port != c.port || cfg.ListenAddress() != c.addr {
			t.Errorf("%s (%s): Address %q Port %d, want %q %d", c.name, c.file, cfg.Address, cfg.Port, c.addr, c.port)
		}
	}
	if got := (&Config{Port: 1234}).ListenAddress(); got != ":1234" {
		t.Errorf("ListenAddress of a Config without Address: %q", got)
	}
}

// Across files the later address wins, as every scalar; a bare address in
// one file and port in another combine (a CTS configuration's port with
// the packaged loopback address).
func TestListenAddressMerge(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	writeFile(t, dir, "a.hcl", `address = "0.0.0.0:9000"`)
	writeFile(t, dir, "b.hcl", `address = "127.0.0.1:9001"`)
	if cfg := mustLoad(t, dir); cfg.Address != "127.0.0.1:9001" {
		t.Errorf("merged address %q, want the later file's", cfg.Address)
	}
	dir = t.TempDir()
	writeFile(t, dir, "ctsync.hcl", `address = "127.0.0.1"`)
	writeFile(t, dir, "cts.hcl", `port = 8600`)
	if cfg := mustLoad(t, dir); cfg.Address != "127.0.0.1:8600" || cfg.Port != 8600 {
		t.Errorf("bare address + port in another file: %q %d", cfg.Address, cfg.Port)
	}
}

// A bad address, or an address and a port that disagree, is an error
// naming the file, the line and the field, in each syntax.
func TestListenAddressErrors(t *testing.T) {
	clearConsulEnv(t)
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"name.hcl", "\naddress = \"localhost:8558\"", []string{"name.hcl:2: address:", `"localhost:8558" is not an IP address`}},
		{"host.hcl", "\n\naddress = \"ctsync.example.com\"", []string{"host.hcl:3: address:", "a host name is not accepted"}},
		{"empty.hcl", `address = ""`, []string{"empty.hcl:1: address:", "is empty"}},
		{"badport.hcl", `address = "127.0.0.1:99999"`, []string{"badport.hcl:1: address:", `the port "99999" must be a number between 0 and 65535`}},
		{"noport.hcl", `address = "127.0.0.1:"`, []string{"noport.hcl:1: address:", `the port ""`}},
		{"wordport.hcl", `address = "127.0.0.1:http"`, []string{"wordport.hcl:1: address:", `the port "http"`}},
		{"scheme.hcl", `address = "http://127.0.0.1:8558"`, []string{"scheme.hcl:1: address:", "is not an IP address"}},
		{"number.hcl", `address = 8558`, []string{"number.hcl:1: address:"}},
		{"conflict.hcl", "port = 9000\naddress = \"127.0.0.1:8558\"", []string{"conflict.hcl:2: address:",
			`"127.0.0.1:8558" listens on port 8558, but port = 9000 (`, "conflict.hcl:1): set the port in one place"}},
		{"hcl1.hcl", `log_level = "INFO", address = "::1:8558:x"`, []string{"hcl1.hcl:1: address:", "is not an IP address"}},
		{"json.json", "{\n  \"address\": \"web:80\"\n}", []string{"json.json:2: address:", `"web:80" is not an IP address`}},
	} {
		path := writeFile(t, t.TempDir(), c.name, c.file)
		_, err := Load([]string{path})
		if err == nil {
			t.Errorf("%s (%s): loaded", c.name, c.file)
			continue
		}
		msg := strings.ReplaceAll(err.Error(), filepath.Dir(path)+string(filepath.Separator), "")
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q lacks %q", c.name, msg, w)
			}
		}
	}
	// The conflict across two files names both.
	dir := t.TempDir()
	writeFile(t, dir, "a.hcl", "\naddress = \"127.0.0.1:8558\"")
	writeFile(t, dir, "b.hcl", "port = 9000")
	_, err := Load([]string{dir})
	if err == nil || !strings.Contains(err.Error(), "a.hcl:2: address:") || !strings.Contains(err.Error(), "b.hcl:1)") {
		t.Errorf("address and port in two files: %v", err)
	}
}
