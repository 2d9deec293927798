package election

import (
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseConfig(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name     string
		env      func(string) (string, bool)
		want     Config
		problems []string // substrings, in order
	}{
		{"unset: off, defaults", env(), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s}, nil},
		{"on", env(EnvElection, "true"), Config{Enabled: true, LeaseDuration: 15 * s, RenewInterval: 5 * s}, nil},
		{"on, case and space folded", env(EnvElection, " TRUE "), Config{Enabled: true, LeaseDuration: 15 * s, RenewInterval: 5 * s}, nil},
		{"1", env(EnvElection, "1"), Config{Enabled: true, LeaseDuration: 15 * s, RenewInterval: 5 * s}, nil},
		{"off", env(EnvElection, "false"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s}, nil},
		{"empty means unset", env(EnvElection, ""), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s}, nil},
		{"unparseable: off, reported", env(EnvElection, "yes please"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s},
			[]string{`NOETL_EHDB_ELECTION="yes please" is not a boolean`}},
		{"lease 30: renew defaults to 10", env(EnvLeaseSecs, "30"), Config{LeaseDuration: 30 * s, RenewInterval: 10 * s}, nil},
		{"lease 10: renew 3 (whole seconds)", env(EnvLeaseSecs, "10"), Config{LeaseDuration: 10 * s, RenewInterval: 3 * s}, nil},
		{"lease below 3: clamped", env(EnvLeaseSecs, "1"), Config{LeaseDuration: 3 * s, RenewInterval: 1 * s},
			[]string{"NOETL_EHDB_ELECTION_LEASE_SECS=1 is below 3; clamped to 3"}},
		{"lease above 300: clamped", env(EnvLeaseSecs, "301"), Config{LeaseDuration: 300 * s, RenewInterval: 100 * s},
			[]string{"clamped to 300"}},
		{"lease negative", env(EnvLeaseSecs, "-5"), Config{LeaseDuration: 3 * s, RenewInterval: 1 * s}, []string{"clamped to 3"}},
		// Red team O of stop 33: a number past int64 was "not a whole number", and the default ran.
		{"lease past int64: clamped", env(EnvLeaseSecs, "99999999999999999999"), Config{LeaseDuration: 300 * s, RenewInterval: 100 * s}, []string{"clamped to 300"}},
		{"lease past -int64: clamped", env(EnvLeaseSecs, "-99999999999999999999"), Config{LeaseDuration: 3 * s, RenewInterval: 1 * s}, []string{"clamped to 3"}},
		{"renew past int64: clamped", env(EnvLeaseSecs, "300", EnvRenewSecs, "99999999999999999999"), Config{LeaseDuration: 300 * s, RenewInterval: 150 * s}, []string{"clamped to 150"}},
		{"lease unparseable: default", env(EnvLeaseSecs, "15s"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s},
			[]string{`NOETL_EHDB_ELECTION_LEASE_SECS="15s" is not a whole number of seconds; using the default 15`}},
		{"renew set", env(EnvRenewSecs, "2"), Config{LeaseDuration: 15 * s, RenewInterval: 2 * s}, nil},
		{"renew 0: clamped to 1", env(EnvRenewSecs, "0"), Config{LeaseDuration: 15 * s, RenewInterval: 1 * s}, []string{"clamped to 1"}},
		{"renew above lease/2: clamped", env(EnvLeaseSecs, "10", EnvRenewSecs, "6"), Config{LeaseDuration: 10 * s, RenewInterval: 5 * s},
			[]string{"NOETL_EHDB_ELECTION_RENEW_SECS=6 is above 5; clamped to 5"}},
		{"renew bound follows the clamped lease", env(EnvLeaseSecs, "2", EnvRenewSecs, "2"), Config{LeaseDuration: 3 * s, RenewInterval: 1 * s},
			[]string{"clamped to 3", "clamped to 1"}},
		{"renew unparseable: default lease/3", env(EnvLeaseSecs, "30", EnvRenewSecs, "x"), Config{LeaseDuration: 30 * s, RenewInterval: 10 * s},
			[]string{"using the default 10 (lease/3)"}},
		{"shard from env", env(EnvShard, "255"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Shard: 255, HasShard: true}, nil},
		{"shard env wins over hostname", env(EnvShard, "3", "HOSTNAME", "w-9"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Shard: 3, HasShard: true}, nil},
		{"shard from the StatefulSet ordinal", env("HOSTNAME", "noetl-cmdbus-writer-12"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Shard: 12, HasShard: true}, nil},
		{"no ordinal: no shard, never 0", env("HOSTNAME", "laptop"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s}, nil},
		{"unparseable shard: no shard, not the ordinal", env(EnvShard, "ff", "HOSTNAME", "w-1"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s},
			[]string{`NOETL_EHDB_ELECTION_SHARD="ff" is not a shard number`}},
		{"shard out of range", env(EnvShard, "4294967296"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s}, []string{"is not a shard number"}},
		{"ordinal out of range", env("HOSTNAME", "w-4294967296"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s}, []string{"out of range"}},
		{"namespace from env", env(EnvNamespace, "noetl", "POD_NAMESPACE", "other"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Namespace: "noetl"}, nil},
		{"namespace from POD_NAMESPACE", env("POD_NAMESPACE", "other"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Namespace: "other"}, nil},
		{"fencing enforce, trimmed", env(EnvFencing, " enforce "), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Fencing: "enforce"}, nil},
		{"fencing case-folded", env(EnvFencing, "ENFORCE"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Fencing: "ENFORCE"}, nil},
		{"fencing shadow", env(EnvFencing, "Shadow"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Fencing: "Shadow"}, nil},
		{"fencing off", env(EnvFencing, "off"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Fencing: "off"}, nil},
		{"fencing blank means unset", env(EnvFencing, "  "), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s}, nil},
		{"fencing unknown: reported, not armed", env(EnvFencing, "enforced"), Config{LeaseDuration: 15 * s, RenewInterval: 5 * s, Fencing: "enforced"},
			[]string{`NOETL_EHDB_FENCING="enforced" is not off, shadow or enforce; only enforce arms the fence`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := ParseConfig(tc.env)
			if got != tc.want {
				t.Errorf("config %+v, want %+v", got, tc.want)
			}
			if len(problems) != len(tc.problems) {
				t.Fatalf("problems %v, want %d matching %q", problems, len(tc.problems), tc.problems)
			}
			for i, p := range problems {
				if !strings.Contains(p.Error(), tc.problems[i]) {
					t.Errorf("problem %d %q, want it to contain %q", i, p, tc.problems[i])
				}
			}
		})
	}
}

// Armed is the admission guard's rule (webhook/policy.go: trimmed, case-folded "enforce"), so the
// writer's readiness and the guard never disagree on whether a fence is armed.
func TestArmed(t *testing.T) {
	for v, want := range map[string]bool{
		"enforce": true, " Enforce\t": true, "ENFORCE": true,
		"": false, "shadow": false, "off": false, "enforced": false, "en force": false, "true": false,
	} {
		if got := FenceArmed(v); got != want {
			t.Errorf("FenceArmed(%q) = %v, want %v", v, got, want)
		}
		cfg, _ := ParseConfig(env(EnvFencing, v))
		if got := cfg.Armed(); got != want {
			t.Errorf("ParseConfig(%s=%q).Armed() = %v, want %v", EnvFencing, v, got, want)
		}
	}
}

func TestLeaseName(t *testing.T) {
	for shard, want := range map[uint32]string{0: "ehdb-shard-00000000", 255: "ehdb-shard-000000ff", 1<<32 - 1: "ehdb-shard-ffffffff"} {
		if got := LeaseName(shard); got != want {
			t.Errorf("LeaseName(%d) = %q, want %q", shard, got, want)
		}
	}
}

func TestIdentityIsPerProcess(t *testing.T) {
	a, b := NewIdentity("noetl-cmdbus-writer-0"), NewIdentity("noetl-cmdbus-writer-0")
	if a == b || !strings.HasPrefix(a, "noetl-cmdbus-writer-0#") || len(a) != len("noetl-cmdbus-writer-0#")+36 {
		t.Fatalf("identities %q %q", a, b)
	}
}
