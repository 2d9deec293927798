package election

import "github.com/noetl/ehdb-election/internal/electionenv"

// The environment variables the election reads. The webhook reads the same names from a container's
// resolved environment, through the same ParseConfig, so both judge "election enabled" identically.
const (
	EnvElection  = electionenv.EnvElection
	EnvLeaseSecs = electionenv.EnvLeaseSecs
	EnvRenewSecs = electionenv.EnvRenewSecs
	EnvShard     = electionenv.EnvShard
	EnvNamespace = electionenv.EnvNamespace
	// EnvFencing arms the writer's fence: off | shadow | enforce. The election runs the same
	// whatever it says; the writer's readiness (Readiness) and the admission guard act on it.
	EnvFencing = electionenv.EnvFencing
)

// Config is the election's configuration after parsing and clamping: what runs, what the gauges
// show and what the start-up log line prints. Shard is meaningful only when HasShard is set (a
// missing shard is never guessed as 0); Namespace is empty when the environment names none.
type Config = electionenv.Config

// ParseConfig is THE parser of the election's environment: a writer passes os.LookupEnv, the
// webhook a container's resolved environment. It never fails. Every value it cannot use as given
// is returned as a problem and replaced by the safe choice: an unparseable switch means off, an
// unparseable duration its default, an out-of-range one is clamped, an unparseable shard no shard.
func ParseConfig(lookup func(string) (string, bool)) (Config, []error) {
	return electionenv.Parse(lookup)
}

// FenceArmed says whether one value of NOETL_EHDB_FENCING arms the fence: trimmed and case-folded,
// it is "enforce". It is the admission guard's rule, so the writer and the guard agree on "armed".
func FenceArmed(v string) bool { return electionenv.FenceArmed(v) }

// LeaseName is the name of a shard's Lease: one election per writer process, not per bus, because
// both buses of a writer live on the same ordinal's volumes.
func LeaseName(shard uint32) string { return electionenv.LeaseName(shard) }
