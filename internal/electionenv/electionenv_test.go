package electionenv

import "testing"

// ParseLeaseName must read back exactly what LeaseName writes, and nothing else.
func TestParseLeaseNameRoundTrip(t *testing.T) {
	for _, shard := range []uint32{0, 1, 255, 0x10000, 0xffffffff} {
		name := LeaseName(shard)
		got, err := ParseLeaseName(name)
		if err != nil || got != shard {
			t.Errorf("ParseLeaseName(%q) = %d, %v; want %d", name, got, err, shard)
		}
	}
	for _, name := range []string{"kube-scheduler", "ehdb-shard-0000000", "ehdb-shard-0000000A", "ehdb-shard-000000000", "ehdb-shard-+0000000"} {
		if _, err := ParseLeaseName(name); err == nil {
			t.Errorf("ParseLeaseName(%q) succeeded", name)
		}
	}
}
