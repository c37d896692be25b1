package main

// The Helm chart (deploy/helm/ctsync), rendered by a real helm (built into
// .tools by scripts/tools.sh): it lints; each shape renders the objects it
// should (one instance, a spread cluster with tokens and a ServiceMonitor);
// values that would run two instances without high availability are
// refused; and the configuration the chart writes loads in ctsync, run
// against a real Consul as the pod would (the ConfigMap's file plus the
// instance address file the container writes).

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"go.yaml.in/yaml/v3"
)

func chartDir() string { return filepath.Join(opts.root, "deploy", "helm", "ctsync") }

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("helm", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// render runs helm template with the values and returns the objects by
// "Kind/name".
func render(t *testing.T, set ...string) map[string]map[string]any {
	t.Helper()
	args := []string{"template", "rel", chartDir(), "--namespace", "ns"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", set, err, out)
	}
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("helm template output: %v\n%s", err, out)
		}
		if o == nil {
			continue
		}
		md := o["metadata"].(map[string]any)
		objs[fmt.Sprintf("%s/%s", o["kind"], md["name"])] = o
	}
	return objs
}

// dig walks a decoded object along keys (string map keys, int list indexes).
func dig(o any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := o.(map[string]any)
			if !ok {
				return nil
			}
			o = m[k]
		case int:
			l, ok := o.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			o = l[k]
		}
	}
	return o
}

func kinds(objs map[string]map[string]any) string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, " ")
}

// podVolume is the pod template's volume named name, or nil.
func podVolume(sts map[string]any, name string) any {
	vs, _ := dig(sts, "spec", "template", "spec", "volumes").([]any)
	for _, v := range vs {
		if dig(v, "name") == name {
			return v
		}
	}
	return nil
}

func needHelm(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("helm"); err != nil {
		t.Skip("needs helm (TOOLS_RELEASE=1 scripts/tools.sh builds it into .tools)")
	}
}

func TestChartLintAndTemplate(t *testing.T) {
	needHelm(t)
	if out, err := helm(t, "lint", "--strict", chartDir()); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}

	// One instance: no ServiceMonitor; a StatefulSet, whose rolling
	// update stops the pod before its replacement starts, so never two;
	// the Secret of the generated API token.
	one := render(t)
	if got, want := kinds(one), "ConfigMap/rel-ctsync PodDisruptionBudget/rel-ctsync Secret/rel-ctsync-secrets Service/rel-ctsync ServiceAccount/rel-ctsync StatefulSet/rel-ctsync"; got != want {
		t.Errorf("default objects:\n got %s\nwant %s", got, want)
	}
	checkGeneratedToken(t, one)
	dep := one["StatefulSet/rel-ctsync"]
	if s := dig(dep, "spec", "updateStrategy", "type"); s != "RollingUpdate" || dig(dep, "spec", "podManagementPolicy") != "OrderedReady" {
		t.Errorf("one instance: updateStrategy %v, podManagementPolicy %v", s, dig(dep, "spec", "podManagementPolicy"))
	}
	// /var/lib/ctsync (history, held plans, plugin cache) on a claim of
	// its own, kept across rollouts: by default, 2Gi, the default class.
	if n, m := dig(dep, "spec", "volumeClaimTemplates", 0, "metadata", "name"), dig(dep, "spec", "template", "spec", "containers", 0, "volumeMounts", 1); n != "work" ||
		dig(m, "name") != "work" || dig(m, "mountPath") != "/var/lib/ctsync" {
		t.Errorf("persistence: claim %v, mount %v", n, m)
	}
	if sz := dig(dep, "spec", "volumeClaimTemplates", 0, "spec", "resources", "requests", "storage"); sz != "2Gi" ||
		dig(dep, "spec", "volumeClaimTemplates", 0, "spec", "storageClassName") != nil ||
		dig(dep, "spec", "volumeClaimTemplates", 0, "spec", "accessModes", 0) != "ReadWriteOnce" {
		t.Errorf("the claim template: %v", dig(dep, "spec", "volumeClaimTemplates", 0))
	}
	if v := podVolume(dep, "work"); v != nil {
		t.Errorf("a pod volume work besides the claim template: %v", v)
	}
	// A storage class, "-" for none, an existing claim, or an emptyDir.
	if sc := dig(render(t, "persistence.storageClass=fast", "persistence.size=10Gi")["StatefulSet/rel-ctsync"], "spec", "volumeClaimTemplates", 0, "spec", "storageClassName"); sc != "fast" {
		t.Errorf("storageClass fast: %v", sc)
	}
	if sc := dig(render(t, "persistence.storageClass=-")["StatefulSet/rel-ctsync"], "spec", "volumeClaimTemplates", 0, "spec", "storageClassName"); sc != "" {
		t.Errorf("storageClass -: %v, want \"\"", sc)
	}
	ex := render(t, "persistence.existingClaim=ctsync-data")["StatefulSet/rel-ctsync"]
	if c := dig(podVolume(ex, "work"), "persistentVolumeClaim", "claimName"); c != "ctsync-data" || dig(ex, "spec", "volumeClaimTemplates") != nil {
		t.Errorf("existingClaim: volume %v, templates %v", podVolume(ex, "work"), dig(ex, "spec", "volumeClaimTemplates"))
	}
	off := render(t, "persistence.enabled=false")["StatefulSet/rel-ctsync"]
	if l := dig(podVolume(off, "work"), "emptyDir", "sizeLimit"); l != "2Gi" || dig(off, "spec", "volumeClaimTemplates") != nil {
		t.Errorf("persistence off: volume %v, templates %v", podVolume(off, "work"), dig(off, "spec", "volumeClaimTemplates"))
	}
	if out, err := helm(t, "template", "rel", chartDir(), "--set", "replicaCount=2", "--set", "highAvailability.enabled=true",
		"--set", "persistence.existingClaim=ctsync-data"); err == nil || !strings.Contains(out, "persistence.existingClaim is one volume for one instance") {
		t.Errorf("existingClaim with two instances rendered (err %v):\n%s", err, out)
	}
	c := dig(dep, "spec", "template", "spec", "containers", 0)
	// Readiness follows /v1/health (Consul reachable, controller live);
	// liveness must not (TestChartLivenessWithoutConsul).
	if p := dig(c, "readinessProbe", "httpGet", "path"); p != "/v1/health" {
		t.Errorf("readinessProbe path %v, want /v1/health", p)
	}
	if p := dig(c, "livenessProbe", "httpGet", "path"); p != "/ui/" {
		t.Errorf("livenessProbe path %v, want /ui/", p)
	}
	if u := dig(dep, "spec", "template", "spec", "securityContext", "runAsUser"); u != 65532 {
		t.Errorf("runAsUser %v, want 65532 (the image's user)", u)
	}

	// A spread cluster with API tokens, a Consul token and a ServiceMonitor.
	ha := render(t, "replicaCount=3", "highAvailability.enabled=true", "highAvailability.mode=spread",
		"serviceMonitor.enabled=true", "consul.token.existingSecret=consul-acl",
		"apiAuth.tokens[0].name=ops", "apiAuth.tokens[0].access=write", "apiAuth.tokens[0].existingSecret=ops-token",
		"apiAuth.tokens[1].name=dashboard", "apiAuth.tokens[1].access=read", "apiAuth.tokens[1].value=0123456789abcdef-read")
	for _, k := range []string{"ServiceMonitor/rel-ctsync", "Secret/rel-ctsync-secrets", "PodDisruptionBudget/rel-ctsync"} {
		if ha[k] == nil {
			t.Errorf("HA: no %s among %s", k, kinds(ha))
		}
	}
	hcl, _ := dig(ha["ConfigMap/rel-ctsync"], "data", "ctsync.hcl").(string)
	for _, want := range []string{`spread_tasks = true`, `name        = "ops"`, `secret_file = "/etc/ctsync/tokens/dashboard"`, `"rel-ctsync.ns.svc"`} {
		if !strings.Contains(hcl, want) {
			t.Errorf("HA config lacks %s:\n%s", want, hcl)
		}
	}
	if _, ok := dig(ha["Secret/rel-ctsync-secrets"], "data", "api-token-dashboard").(string); !ok {
		t.Errorf("the inline dashboard token is not in the chart's Secret")
	}
	if dig(ha["Secret/rel-ctsync-secrets"], "data", "api-token-ops") != nil {
		t.Errorf("the ops token comes from an existing Secret, yet the chart stores one")
	}
	hc := dig(ha["StatefulSet/rel-ctsync"], "spec", "template", "spec", "containers", 0)
	if s := dig(hc, "env", 1, "valueFrom", "secretKeyRef", "name"); s != "consul-acl" {
		t.Errorf("CONSUL_HTTP_TOKEN from %v, want the Secret consul-acl", s)
	}
	if r := dig(ha["StatefulSet/rel-ctsync"], "spec", "replicas"); r != 3 || dig(ha["StatefulSet/rel-ctsync"], "spec", "podManagementPolicy") != "Parallel" {
		t.Errorf("replicas %v, podManagementPolicy %v", r, dig(ha["StatefulSet/rel-ctsync"], "spec", "podManagementPolicy"))
	}
	if n := dig(ha["StatefulSet/rel-ctsync"], "spec", "volumeClaimTemplates", 0, "metadata", "name"); n != "work" {
		t.Errorf("HA: each instance's claim: %v", n)
	}

	// Two instances without high availability would both apply every task.
	if out, err := helm(t, "template", "rel", chartDir(), "--set", "replicaCount=2"); err == nil || !strings.Contains(out, "needs highAvailability.enabled=true") {
		t.Errorf("replicaCount=2 without HA rendered (err %v):\n%s", err, out)
	}
	if out, err := helm(t, "template", "rel", chartDir(), "--set", "highAvailability.mode=solo"); err == nil || !strings.Contains(out, "highAvailability.mode") {
		t.Errorf("mode=solo rendered (err %v):\n%s", err, out)
	}
}

// renderText is helm template's output with the values.
func renderText(t *testing.T, set ...string) string {
	t.Helper()
	args := []string{"template", "rel", chartDir(), "--namespace", "ns"}
	for _, v := range set {
		args = append(args, "--set", v)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", set, err, out)
	}
	return out
}

// By default the API requires a token: the chart generates a write token
// "admin" (random, in its Secret, mounted as the token's secret_file), and
// the API listens on every interface of the pod (no address: the probes,
// the Service, the other instances reach it at the pod's IP). The pod's
// checksum is that of the Secret rendered, generated token included. Tokens
// of the user's replace it; generateToken=false leaves the API open.
func checkGeneratedToken(t *testing.T, one map[string]map[string]any) {
	t.Helper()
	hcl, _ := dig(one["ConfigMap/rel-ctsync"], "data", "ctsync.hcl").(string)
	for _, want := range []string{"api_auth {", `name        = "admin"`, `access      = "write"`, `secret_file = "/etc/ctsync/tokens/admin"`, "\nport        = 8558\n"} {
		if !strings.Contains(hcl, want) {
			t.Errorf("the default configuration lacks %s:\n%s", want, hcl)
		}
	}
	if strings.Contains(hcl, "address     =") || strings.Contains(hcl, "\naddress") {
		t.Errorf("the chart sets a listen address: the probes need the pod's IP:\n%s", hcl)
	}
	enc, _ := dig(one["Secret/rel-ctsync-secrets"], "data", "api-token-admin").(string)
	secret, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || !regexp.MustCompile(`^[A-Za-z0-9]{40}$`).Match(secret) {
		t.Errorf("the generated token: %q (%v), want 40 random letters and digits", secret, err)
	}
	c := dig(one["StatefulSet/rel-ctsync"], "spec", "template", "spec", "containers", 0)
	mounted := false
	for _, m := range dig(c, "volumeMounts").([]any) {
		mounted = mounted || dig(m, "mountPath") == "/etc/ctsync/tokens/admin"
	}
	if v := podVolume(one["StatefulSet/rel-ctsync"], "token-admin"); !mounted || dig(v, "secret", "secretName") != "rel-ctsync-secrets" ||
		dig(v, "secret", "items", 0, "key") != "api-token-admin" {
		t.Errorf("the generated token is not mounted from the chart's Secret: mounted %v, volume %v", mounted, v)
	}
	// The checksum annotation is of the same Secret (the token is generated
	// once per rendering), so a pod restarts when the token changes.
	out := renderText(t)
	var secretDoc, sum string
	for _, doc := range strings.Split(out, "---\n") {
		if rest, ok := strings.CutPrefix(doc, "# Source: ctsync/templates/secret.yaml\n"); ok {
			secretDoc = rest
		}
	}
	if m := regexp.MustCompile(`checksum/secret: ([0-9a-f]+)`).FindStringSubmatch(out); m != nil {
		sum = m[1]
	}
	if h := sha256.Sum256([]byte("\n" + secretDoc)); secretDoc == "" || hex.EncodeToString(h[:]) != sum {
		t.Errorf("checksum/secret %s is not the rendered Secret's:\n%s", sum, secretDoc)
	}
	if a, b := renderText(t), renderText(t); a == b {
		t.Errorf("two renderings generated the same token")
	}

	own := render(t, "apiAuth.tokens[0].name=ops", "apiAuth.tokens[0].access=write", "apiAuth.tokens[0].existingSecret=ops-token")
	if hcl, _ := dig(own["ConfigMap/rel-ctsync"], "data", "ctsync.hcl").(string); strings.Contains(hcl, `"admin"`) || own["Secret/rel-ctsync-secrets"] != nil {
		t.Errorf("tokens of the user's and a generated one:\n%s", hcl)
	}
	open := render(t, "apiAuth.generateToken=false")
	if hcl, _ := dig(open["ConfigMap/rel-ctsync"], "data", "ctsync.hcl").(string); strings.Contains(hcl, "api_auth") || open["Secret/rel-ctsync-secrets"] != nil {
		t.Errorf("generateToken=false: api_auth or a Secret:\n%s", hcl)
	}
}

// The chart's configuration, as a pod of a leader/follower cluster gets it
// (ConfigMap + the instance file its container writes), loads in ctsync and
// runs against a real Consul.
func TestChartConfigLoads(t *testing.T) {
	needHelm(t)
	if _, err := exec.LookPath("consul"); err != nil {
		t.Skip("needs consul")
	}
	consul := startConsul(t)
	port := freePort(t)
	objs := render(t, "replicaCount=2", "highAvailability.enabled=true", "consul.address="+consul,
		fmt.Sprintf("service.port=%d", port), "config=task {\n  name = \"web\"\n  module = \"./m\"\n  condition \"services\" {\n    names = [\"web\"]\n  }\n}\n")
	dir := t.TempDir()
	hcl, _ := dig(objs["ConfigMap/rel-ctsync"], "data", "ctsync.hcl").(string)
	// The pod's working directory, here.
	hcl = strings.Replace(hcl, `"/var/lib/ctsync/sync-tasks"`, fmt.Sprintf("%q", filepath.Join(dir, "sync-tasks")), 1)
	// The generated API token, mounted from the chart's Secret.
	enc, _ := dig(objs["Secret/rel-ctsync-secrets"], "data", "api-token-admin").(string)
	token, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(token) == 0 {
		t.Fatalf("no generated token in the chart's Secret: %q %v", enc, err)
	}
	hcl = strings.Replace(hcl, `"/etc/ctsync/tokens/admin"`, fmt.Sprintf("%q", filepath.Join(dir, "admin.token")), 1)
	must(t, os.WriteFile(filepath.Join(dir, "admin.token"), token, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "ctsync.hcl"), []byte(hcl), 0o644))
	// The container's command, with this machine's paths.
	script, _ := dig(objs["StatefulSet/rel-ctsync"], "spec", "template", "spec", "containers", 0, "args", 0).(string)
	bin := binaryFromTarball(t)
	script = strings.NewReplacer("/tmp/instance.hcl", filepath.Join(dir, "instance.hcl"),
		"/usr/bin/ctsync", bin, "-config-dir=/etc/ctsync.d", "-config-dir="+dir).Replace(script)
	daemonScript := script
	script = strings.Replace(script, "-config-dir="+dir, "-config-dir="+dir+" -inspect", 1)
	must(t, os.MkdirAll(filepath.Join(dir, "m"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "m", "main.tf"), []byte("variable \"services\" {\n  type = any\n}\n"), 0o644))
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "POD_IP=127.0.0.1", "CTSYNC_ONCE_WAIT=60s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctsync with the chart's configuration: %v\n%s\nconfiguration:\n%s", err, out, hcl)
	}
	if !strings.Contains(string(out), `Plan for task "web"`) {
		t.Errorf("ctsync -inspect did not plan the chart's task:\n%s", out)
	}
	inst, err := os.ReadFile(filepath.Join(dir, "instance.hcl"))
	must(t, err)
	if !strings.Contains(string(inst), fmt.Sprintf(`address = "127.0.0.1:%d"`, port)) {
		t.Errorf("instance file:\n%s", inst)
	}

	// The daemon, as the pod runs it: it leads its cluster and advertises
	// the address the container wrote.
	daemon := exec.Command("sh", "-c", daemonScript)
	daemon.Dir = dir
	daemon.Env = append(os.Environ(), "POD_IP=127.0.0.1")
	var logs bytes.Buffer
	daemon.Stdout, daemon.Stderr = &logs, &logs
	must(t, daemon.Start())
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	want := fmt.Sprintf(`"127.0.0.1:%d"`, port)
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/status/cluster", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+string(token))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(string(b), want) && strings.Contains(string(b), `"leader":true`) {
				t.Logf("/v1/status/cluster: %s", b)
				break
			}
		}
		if time.Now().After(deadline) {
			_ = daemon.Process.Kill()
			t.Fatalf("the chart's cluster member does not lead with address %s within a minute:\n%s", want, logs.String())
		}
		time.Sleep(200 * time.Millisecond) // polling the daemon's API
	}
	// The generated token is required.
	if resp, err := http.Get(url); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s without the token: %v %v, want 401", url, resp, err)
	} else {
		resp.Body.Close()
	}
	must(t, daemon.Process.Signal(syscall.SIGTERM))
	if err := <-exited; err != nil {
		t.Errorf("ctsync after SIGTERM: %v\n%s", err, logs.String())
	}
}

// binaryFromTarball is the ctsync of the linux/amd64 tarball in -dist.
func binaryFromTarball(t *testing.T) string { return binaryFromTarballArch(t, "amd64") }

// binaryFromTarballArch is the ctsync of the linux/arch tarball in -dist.
func binaryFromTarballArch(t *testing.T, arch string) string {
	t.Helper()
	return fileFromTarballArch(t, arch, "ctsync")
}

// fileFromTarballArch extracts one file of the arch's tarball.
func fileFromTarballArch(t *testing.T, arch, name string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("tar", "-xzf", artifact(t, "linux_"+arch+".tar.gz"), "-C", dir, name).CombinedOutput()
	if err != nil {
		t.Fatalf("untar: %v\n%s", err, out)
	}
	return filepath.Join(dir, name)
}

// The chart make release packages (dist/ctsync-<version>.tgz) lints, and
// its default image is the one the image archive names when loaded
// (docker load, podman load, containerd's import), under the repository
// the chart in the source tree defaults to.
func TestChartPackageMatchesImage(t *testing.T) {
	needHelm(t)
	version := distVersion(t)
	pkg := filepath.Join(opts.dist, "ctsync-"+version+".tgz")
	if out, err := helm(t, "lint", "--strict", pkg); err != nil {
		t.Fatalf("helm lint %s: %v\n%s", pkg, err, out)
	}
	var meta struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	out, err := helm(t, "show", "chart", pkg)
	must(t, err)
	must(t, yaml.Unmarshal([]byte(out), &meta))
	if meta.Version != version || meta.AppVersion != dockerTag(version) {
		t.Errorf("packaged chart: version %q appVersion %q, want %q and %q", meta.Version, meta.AppVersion, version, dockerTag(version))
	}

	// The name the archive gives the image.
	archive := artifact(t, "oci.tar")
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	must(t, err)
	if len(m) != 1 || len(m[0].RepoTags) != 1 {
		t.Fatalf("manifest.json: %+v", m)
	}
	ref := m[0].RepoTags[0]
	if want := imageRepository + ":" + dockerTag(version); ref != want {
		t.Errorf("the archive names the image %s, want %s", ref, want)
	}
	dir := t.TempDir()
	out2, err := exec.Command("tar", "-xf", archive, "-C", dir, "index.json").CombinedOutput()
	if err != nil {
		t.Fatalf("untar index.json: %v\n%s", err, out2)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	if n := im.Manifests[0].Annotations["io.containerd.image.name"]; n != ref {
		t.Errorf("index.json names the image %q for containerd, manifest.json %q", n, ref)
	}

	// The packaged chart's StatefulSet runs exactly that image.
	tpl, err := helm(t, "template", "rel", pkg)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", pkg, err, tpl)
	}
	if !strings.Contains(tpl, fmt.Sprintf("image: %q\n", ref)) {
		t.Errorf("the packaged chart does not run %s:\n%s", ref, tpl)
	}

	// The chart in the source tree defaults to the same repository.
	var values struct {
		Image struct {
			Repository string `yaml:"repository"`
		} `yaml:"image"`
	}
	data, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	must(t, err)
	must(t, yaml.Unmarshal(data, &values))
	if values.Image.Repository != imageRepository {
		t.Errorf("values.yaml: image.repository %q, want %q (where the release publishes the image)", values.Image.Repository, imageRepository)
	}
}

// The liveness probe of the chart's pod answers while Consul is away: run
// with the chart's configuration and container arguments against an
// address where no Consul listens, the daemon serves the probe's path with
// 200 (with API tokens configured, as the probe sends none), so a long
// Consul outage does not make Kubernetes restart the pods. (/v1/health,
// the readiness probe, turns 503 once a running watch has failed for
// watch.DeadWatchAfter, 2 minutes: the reason liveness does not use it.)
func TestChartLivenessWithoutConsul(t *testing.T) {
	needHelm(t)
	port := freePort(t)
	noConsul := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	objs := render(t, "consul.address="+noConsul, fmt.Sprintf("service.port=%d", port),
		"apiAuth.tokens[0].name=ops", "apiAuth.tokens[0].access=write", "apiAuth.tokens[0].value=0123456789abcdef-write",
		"config=task {\n  name = \"web\"\n  module = \"./m\"\n  condition \"services\" {\n    names = [\"web\"]\n  }\n}\n")
	dep := objs["StatefulSet/rel-ctsync"]
	c := dig(dep, "spec", "template", "spec", "containers", 0)
	path, _ := dig(c, "livenessProbe", "httpGet", "path").(string)
	if path == "" || dig(c, "livenessProbe", "httpGet", "port") != "http" {
		t.Fatalf("livenessProbe: %v", dig(c, "livenessProbe"))
	}
	dir := t.TempDir()
	hcl, _ := dig(objs["ConfigMap/rel-ctsync"], "data", "ctsync.hcl").(string)
	hcl = strings.Replace(hcl, `"/var/lib/ctsync/sync-tasks"`, fmt.Sprintf("%q", filepath.Join(dir, "sync-tasks")), 1)
	hcl = strings.Replace(hcl, `"/etc/ctsync/tokens/ops"`, fmt.Sprintf("%q", filepath.Join(dir, "ops.token")), 1)
	must(t, os.WriteFile(filepath.Join(dir, "ctsync.hcl"), []byte(hcl), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "ops.token"), []byte("0123456789abcdef-write"), 0o600))
	must(t, os.MkdirAll(filepath.Join(dir, "m"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "m", "main.tf"), []byte("variable \"services\" {\n  type = any\n}\n"), 0o644))
	var args []string
	for _, a := range dig(c, "args").([]any) {
		args = append(args, strings.Replace(a.(string), "-config-dir=/etc/ctsync.d", "-config-dir="+dir, 1))
	}
	daemon := exec.Command(binaryFromTarball(t), args...)
	daemon.Dir = dir
	var logs bytes.Buffer
	daemon.Stdout, daemon.Stderr = &logs, &logs
	must(t, daemon.Start())
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	defer func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
			t.Fatalf("liveness %s without Consul: %s\n%s", url, resp.Status, logs.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("ctsync exited without Consul: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("liveness %s does not answer within a minute: %v\n%s", url, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond) // polling the daemon's API
	}
}
