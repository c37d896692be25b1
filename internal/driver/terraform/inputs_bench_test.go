package terraform

import (
	"fmt"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

// benchInputs is n service instances shaped like real catalog data, plus
// as many catalog services and KV pairs.
func benchInputs(n int) *task.Inputs {
	in := &task.Inputs{Services: map[string]task.Service{}, CatalogServices: map[string][]string{}, ConsulKV: map[string]string{}}
	for i := 0; i < n; i++ {
		s := sampleService(fmt.Sprintf("web-%d", i), fmt.Sprintf("node-%d", i%50))
		s.Meta = map[string]string{"version": "2", "team": "net", "build": fmt.Sprint(i)}
		s.NodeTaggedAddresses = map[string]string{"lan": "10.0.0.1", "lan_ipv4": "10.0.0.1", "wan": "10.0.0.1", "wan_ipv4": "10.0.0.1"}
		s.CTSUserDefinedMeta = map[string]string{}
		in.Services[s.Key()] = s
		in.CatalogServices[fmt.Sprintf("svc-%d", i)] = []string{"a", "b"}
		in.ConsulKV[fmt.Sprintf("config/key-%d", i)] = "value"
	}
	return in
}

func BenchmarkInputsEncode(b *testing.B) {
	m := &rootModule{catalogServices: true, consulKV: true}
	for _, n := range []int{1000, 5000} {
		in := benchInputs(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				data, err := m.inputsTFVars(in)
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			b.ReportMetric(float64(size), "bytes/file")
		})
	}
}
