package reconcile

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// FuzzBuildInputs drives arbitrary Consul data (service names, ids, tags,
// meta, KV keys and values, a catalog-services regexp) through
// BuildInputs and Fingerprint. Properties:
//   - nothing panics;
//   - the inputs are ready once every query has a value, and hold the data;
//   - Fingerprint (with ModuleInputDigest) is deterministic (same data in
//     fresh maps, same string) and moves when a value the module would see
//     changes, even between two invalid UTF-8 strings;
//   - the JSON of the inputs (what the hash covers and the driver writes)
//     round-trips: every string comes back exactly when it is valid UTF-8,
//     and as JSON's U+FFFD replacement otherwise.
func FuzzBuildInputs(f *testing.F) {
	f.Add("web", "web-1", "tag", "k", "v", "cfg/key", "value", 8080, "^web")
	f.Add(`we"b`, "${id}", "%{ if }", "k-1", "nul\x00", "a/${b}", "\xff\xfe", -1, "(")
	f.Add("", "", "", "", "", "", "", 0, "")
	f.Add("日本", "\u2028", "<&>", "_", "\\", "/", strings.Repeat("x", 4096), 1<<40, ".*")
	f.Fuzz(func(t *testing.T, name, id, tag, metaKey, metaVal, kvKey, kvVal string, port int, re string) {
		spec := task.Spec{Name: "t", Module: "./m", Enabled: true,
			Condition: task.Condition{Services: &task.ServicesCondition{
				ServicesSelector: task.ServicesSelector{Names: []string{name}, CTSUserDefinedMeta: map[string]string{metaKey: metaVal}},
				UseAsModuleInput: true}},
			ModuleInput: task.ModuleInputs{ConsulKV: &task.ConsulKVSelector{Path: kvKey, Recurse: true}},
		}
		build := func(metaVal, kvVal string) (task.Inputs, string, bool) {
			svc := task.Service{ID: id, Name: name, Port: port, Tags: []string{tag, tag + "2"},
				Meta: map[string]string{metaKey: metaVal}, Node: "n1", NodeDatacenter: "dc1",
				NodeMeta: map[string]string{}, NodeTaggedAddresses: map[string]string{}}
			values := map[string]any{
				watch.HealthService(name, watch.ServiceOptions{}).Key(): []task.Service{svc},
				watch.KV(kvKey, true, "", "").Key():                     map[string]string{kvKey: kvVal, kvKey + "/x": ""},
			}
			get := func(k string) (any, bool) { v, ok := values[k]; return v, ok }
			in, ready := BuildInputs(&spec, get)
			fp, fpReady := Fingerprint(&spec, get, digestOf(get))
			if fpReady != ready {
				t.Fatalf("BuildInputs ready %v but Fingerprint ready %v", ready, fpReady)
			}
			// The KV is a module input: what the run used, not what
			// triggers it.
			used, _ := ModuleInputDigest(&spec, get, digestOf(get))
			return in, fp + "/" + used, ready
		}
		in, h, ready := build(metaVal, kvVal)
		if !ready {
			t.Fatal("not ready with every value present")
		}
		if len(in.Services) != 1 || in.ConsulKV[kvKey] != kvVal {
			t.Fatalf("data lost: %+v", in)
		}
		if _, h2, _ := build(metaVal, kvVal); h2 != h {
			t.Fatalf("fingerprint not deterministic: %s vs %s", h, h2)
		}
		if _, h2, _ := build(metaVal+"!", kvVal); h2 == h {
			t.Fatal("a meta change does not change the fingerprint")
		}
		if _, h2, _ := build(metaVal, kvVal+"\xff"); h2 == h {
			t.Fatal("a KV change does not change the fingerprint")
		}

		b, err := json.Marshal(&in)
		if err != nil {
			t.Fatalf("inputs do not encode: %v", err)
		}
		var back task.Inputs
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("inputs JSON does not decode: %v\n%s", err, b)
		}
		if want, ok := viaJSONText(in); ok && !reflect.DeepEqual(back, want) {
			t.Fatalf("JSON round trip changed the inputs:\n got %+v\nwant %+v", back, want)
		}

		// A catalog-services condition with an arbitrary regexp: ready
		// exactly when the regexp compiles.
		cat := task.Spec{Name: "c", Module: "./m", Enabled: true, Condition: task.Condition{
			CatalogServices: &task.CatalogServicesCondition{Regexp: re, UseAsModuleInput: true}}}
		catKey := watch.CatalogServices(watch.CatalogOptions{}).Key()
		catVal := map[string][]string{name: {tag}, id: {}}
		catGet := func(k string) (any, bool) { return catVal, k == catKey }
		_, cready := BuildInputs(&cat, catGet)
		if _, fready := Fingerprint(&cat, catGet, digestOf(catGet)); fready != cready {
			t.Fatal("BuildInputs and Fingerprint disagree on readiness")
		}
		_, _ = CatalogNames(&cat, func(k string) (any, bool) { return catVal, k == catKey })
	})
}

// digestOf computes digests from a Getter, as the controller does for a
// watcher without digests.
func digestOf(get Getter) DigestGetter {
	return func(k string) (watch.Digest, bool) {
		v, ok := get(k)
		if !ok {
			return watch.Digest{}, false
		}
		d, err := watch.DigestOf(v)
		return d, err == nil
	}
}

// jsonText is what JSON makes of a string: invalid UTF-8 bytes become
// U+FFFD, one per byte.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// viaJSONText maps every string of the inputs through jsonText; ok is false
// when two map keys collapse into one (then there is nothing to compare).
func viaJSONText(in task.Inputs) (task.Inputs, bool) {
	ok := true
	mapStr := func(m map[string]string) map[string]string {
		if m == nil {
			return nil
		}
		out := make(map[string]string, len(m))
		for k, v := range m {
			out[jsonText(k)] = jsonText(v)
		}
		if len(out) != len(m) {
			ok = false
		}
		return out
	}
	out := task.Inputs{ConsulKV: mapStr(in.ConsulKV)}
	if in.Services != nil {
		out.Services = map[string]task.Service{}
		for k, s := range in.Services {
			s.ID, s.Name, s.Kind, s.Address = jsonText(s.ID), jsonText(s.Name), jsonText(s.Kind), jsonText(s.Address)
			s.Namespace, s.Status, s.Node, s.NodeID = jsonText(s.Namespace), jsonText(s.Status), jsonText(s.Node), jsonText(s.NodeID)
			s.NodeAddress, s.NodeDatacenter = jsonText(s.NodeAddress), jsonText(s.NodeDatacenter)
			s.Meta, s.NodeMeta = mapStr(s.Meta), mapStr(s.NodeMeta)
			s.NodeTaggedAddresses, s.CTSUserDefinedMeta = mapStr(s.NodeTaggedAddresses), mapStr(s.CTSUserDefinedMeta)
			tags := make([]string, len(s.Tags))
			for i, tg := range s.Tags {
				tags[i] = jsonText(tg)
			}
			s.Tags = tags
			out.Services[jsonText(k)] = s
		}
		if len(out.Services) != len(in.Services) {
			ok = false
		}
	}
	if in.CatalogServices != nil {
		out.CatalogServices = maps.Clone(in.CatalogServices)
	}
	return out, ok
}
