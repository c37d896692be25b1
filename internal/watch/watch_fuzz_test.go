package watch

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/ctsync/ctsync/internal/task"
)

// FuzzHealthDecode feeds arbitrary bytes, as the body of a
// /v1/health/service answer, through what a View does with it: decoding
// with go-json (consul.Client.BlockingGet) into the slim healthEntry and
// normaliseHealth. Properties:
//   - nothing panics, whatever the bytes;
//   - the result is normalised: sorted by node, id, namespace, datacenter;
//     tags sorted; maps and tag lists never nil; a known aggregated status;
//   - go-json reads what Consul can send exactly as encoding/json does:
//     whatever encoding/json accepts is re-encoded the way Consul (a Go
//     program using encoding/json) would write it, and go-json must decode
//     that to the same normalised value;
//   - the same bytes read as a /v1/catalog/services answer normalise to
//     sorted, de-duplicated, non-nil tag lists.
func FuzzHealthDecode(f *testing.F) {
	for _, s := range []string{
		`[]`, `null`, `[null]`, `[{}]`, `[{"Node": null, "Service": null}]`,
		`[{"Node":{"Node":"n1","Address":"10.0.0.1","Datacenter":"dc1","TaggedAddresses":{"lan":"10.0.0.1"},"Meta":{"k":"v"}},` +
			`"Service":{"ID":"web-1","Service":"web","Tags":["b","a","a"],"Address":"","Meta":{"m":"${x}"},"Port":8080,"Namespace":"default"},` +
			`"Checks":[{"CheckID":"serfHealth","Status":"passing"},{"CheckID":"service:web-1","Status":"critical","Output":"down"}]}]`,
		`[{"Node":{"Node":"n"},"Service":{"ID":"a\u0000b","Service":"\ud800","Tags":null,"Port":-1},"Checks":[{"CheckID":"_node_maintenance","Status":"critical"}]}]`,
		`[{"node":{"node":"lower"},"service":{"id":"case","PORT":1e3}}]`,
		`[{"Service":{"ID":"x","Port":99999999999999999999}}]`,
		`[{"Service":{"ID":"x","Tags":["\u2028","<",">","&"]},"Checks":[{"Status":"bogus"}]}]`,
		`{"web":["b","a","b"],"db":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast []*healthEntry
		if err := gojson.Unmarshal(data, &fast); err == nil {
			checkNormalised(t, normaliseHealth(fast))
		}
		var std []*healthEntry
		if err := json.Unmarshal(data, &std); err == nil {
			canonical, err := json.Marshal(std)
			if err != nil {
				t.Fatalf("re-encoding a decoded answer: %v", err)
			}
			var viaStd, viaFast []*healthEntry
			if err := json.Unmarshal(canonical, &viaStd); err != nil {
				t.Fatalf("encoding/json cannot read its own output %q: %v", canonical, err)
			}
			if err := gojson.Unmarshal(canonical, &viaFast); err != nil {
				t.Fatalf("go-json cannot read an answer encoding/json wrote: %q: %v", canonical, err)
			}
			want, got := normaliseHealth(viaStd), normaliseHealth(viaFast)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("go-json and encoding/json disagree on %q:\n go-json  %+v\n std      %+v", canonical, got, want)
			}
			checkNormalised(t, got)
		}
		var cat map[string][]string
		if err := gojson.Unmarshal(data, &cat); err == nil {
			for name, tags := range normaliseCatalog(cat) {
				if tags == nil || !slices.IsSorted(tags) || len(slices.Compact(slices.Clone(tags))) != len(tags) {
					t.Fatalf("catalog tags of %q not normalised: %q", name, tags)
				}
			}
		}
	})
}

func checkNormalised(t *testing.T, svcs []task.Service) {
	t.Helper()
	if svcs == nil {
		t.Fatal("nil result")
	}
	for i, s := range svcs {
		if s.Tags == nil || s.Meta == nil || s.NodeMeta == nil || s.NodeTaggedAddresses == nil {
			t.Fatalf("nil collection in %+v", s)
		}
		if !slices.IsSorted(s.Tags) {
			t.Fatalf("tags not sorted: %q", s.Tags)
		}
		switch s.Status {
		case "passing", "warning", "critical", "maintenance", "":
		default:
			t.Fatalf("status %q", s.Status)
		}
		if i > 0 {
			a, b := svcs[i-1], s
			c := strings.Compare(a.Node, b.Node)
			if c == 0 {
				c = strings.Compare(a.ID, b.ID)
			}
			if c == 0 {
				c = strings.Compare(a.Namespace, b.Namespace)
			}
			if c == 0 {
				c = strings.Compare(a.NodeDatacenter, b.NodeDatacenter)
			}
			if c > 0 {
				t.Fatalf("not sorted: %+v before %+v", a, b)
			}
		}
	}
}
