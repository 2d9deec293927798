// Package electionenv is the election's environment: the variable names, their parser and the
// Lease name of a shard. It lives apart from package election, which talks to the API server, so
// that the admission guard judges a container's environment with the writer's own parser while
// linking none of client-go's typed clients (the guard's fuzzer pays for every package it links).
// Package election re-exports all of it; writers use election.
package electionenv

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The environment variables the election reads. The webhook reads the same names from a container's
// resolved environment, through the same Parse, so both judge "election enabled" identically.
const (
	EnvElection  = "NOETL_EHDB_ELECTION"
	EnvLeaseSecs = "NOETL_EHDB_ELECTION_LEASE_SECS"
	EnvRenewSecs = "NOETL_EHDB_ELECTION_RENEW_SECS"
	EnvShard     = "NOETL_EHDB_ELECTION_SHARD"
	EnvNamespace = "NOETL_EHDB_ELECTION_NAMESPACE"
	// EnvFencing arms the writer's fence: off | shadow | enforce. The election runs the same
	// whatever it says; the writer's readiness (election.Readiness) and the admission guard act on it.
	EnvFencing = "NOETL_EHDB_FENCING"

	// EnvPodNamespace and EnvHostname are the downward-API and kubelet variables the parser falls
	// back on for the Lease namespace and the shard ordinal.
	EnvPodNamespace = "POD_NAMESPACE"
	EnvHostname     = "HOSTNAME"
)

// Bounds of the lease pair, in whole seconds (a Lease records its duration in whole seconds).
const (
	defaultLeaseSecs = 15
	minLeaseSecs     = 3
	maxLeaseSecs     = 300
	minRenewSecs     = 1
)

// Config is the election's configuration after parsing and clamping: what runs, what the gauges
// show and what the start-up log line prints.
type Config struct {
	Enabled       bool
	LeaseDuration time.Duration // after clamping
	RenewInterval time.Duration // after clamping

	// Shard is meaningful only when HasShard is set. A missing shard is never guessed as 0: an
	// election for the wrong shard would mint tokens for another writer's Lease.
	Shard    uint32
	HasShard bool

	// Namespace of the Lease; empty when the environment does not name one (the in-cluster
	// ServiceAccount namespace file is consulted at start-up, not here, so parsing stays pure).
	Namespace string

	// Fencing is NOETL_EHDB_FENCING as given, trimmed ("" when unset); Armed says what it means.
	Fencing string
}

// Armed says whether the fence is armed: the fencing value, trimmed and case-folded, is
// "enforce". It is the admission guard's rule, so the writer and the guard agree on "armed".
func (c Config) Armed() bool { return FenceArmed(c.Fencing) }

// FenceArmed is the rule of Armed for one value of NOETL_EHDB_FENCING.
func FenceArmed(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "enforce") }

// ordinalRE matches a StatefulSet pod name's trailing ordinal ("noetl-cmdbus-writer-3").
var ordinalRE = regexp.MustCompile(`-([0-9]+)$`)

// Parse is THE parser of the election's environment: a writer passes os.LookupEnv, the webhook
// a container's resolved environment. It never fails. Every value it cannot use as given is returned
// as a problem and replaced by the safe choice: an unparseable switch means off (a guessed "on"
// would start an election nobody asked for), an unparseable duration means its default, an
// out-of-range duration is clamped, an unparseable shard means no shard.
func Parse(lookup func(string) (string, bool)) (Config, []error) {
	var problems []error
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}

	var cfg Config
	if v, ok := get(EnvElection); ok {
		b, err := strconv.ParseBool(strings.ToLower(v))
		if err != nil {
			problems = append(problems, fmt.Errorf("%s=%q is not a boolean (true/false/1/0); election stays off", EnvElection, v))
		}
		cfg.Enabled = err == nil && b
	}

	lease := int64(defaultLeaseSecs)
	if v, ok := get(EnvLeaseSecs); ok {
		n, err := seconds(v)
		switch {
		case err != nil:
			problems = append(problems, fmt.Errorf("%s=%q is not a whole number of seconds; using the default %d", EnvLeaseSecs, v, defaultLeaseSecs))
		default:
			lease = clamp(n, minLeaseSecs, maxLeaseSecs, EnvLeaseSecs, &problems)
		}
	}

	renew := lease / 3
	if v, ok := get(EnvRenewSecs); ok {
		n, err := seconds(v)
		switch {
		case err != nil:
			problems = append(problems, fmt.Errorf("%s=%q is not a whole number of seconds; using the default %d (lease/3)", EnvRenewSecs, v, renew))
		default:
			renew = clamp(n, minRenewSecs, lease/2, EnvRenewSecs, &problems)
		}
	}
	cfg.LeaseDuration = time.Duration(lease) * time.Second
	cfg.RenewInterval = time.Duration(renew) * time.Second

	if v, ok := get(EnvShard); ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s=%q is not a shard number (0..%d); no shard", EnvShard, v, uint32(1<<32-1)))
		} else {
			cfg.Shard, cfg.HasShard = uint32(n), true
		}
	} else if host, ok := get(EnvHostname); ok {
		if m := ordinalRE.FindStringSubmatch(host); m != nil {
			n, err := strconv.ParseUint(m[1], 10, 32)
			if err != nil {
				problems = append(problems, fmt.Errorf("the ordinal of %s=%q is out of range; no shard", EnvHostname, host))
			} else {
				cfg.Shard, cfg.HasShard = uint32(n), true
			}
		}
	}

	if v, ok := get(EnvFencing); ok {
		cfg.Fencing = v
		switch {
		case FenceArmed(v), strings.EqualFold(v, "shadow"), strings.EqualFold(v, "off"):
		default:
			problems = append(problems, fmt.Errorf("%s=%q is not off, shadow or enforce; only enforce arms the fence", EnvFencing, v))
		}
	}

	if v, ok := get(EnvNamespace); ok {
		cfg.Namespace = v
	} else if v, ok := get(EnvPodNamespace); ok {
		cfg.Namespace = v
	}
	return cfg, problems
}

// seconds parses a whole number of seconds. One past int64's range is read as its bound, to be
// clamped like any other out of range (SPEC: "an out-of-range one is clamped"): rejected, it ran
// the default, and "99999999999999999999" gave a 15 s lease, not 300 (red team O of stop 33).
func seconds(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return n, nil // ParseInt gives the bound of the sign
	}
	return n, err
}

func clamp(n, lo, hi int64, name string, problems *[]error) int64 {
	switch {
	case n < lo:
		*problems = append(*problems, fmt.Errorf("%s=%d is below %d; clamped to %d", name, n, lo, lo))
		return lo
	case n > hi:
		*problems = append(*problems, fmt.Errorf("%s=%d is above %d; clamped to %d", name, n, hi, hi))
		return hi
	}
	return n
}

// LeasePrefix is the name prefix of every shard Lease (LeaseName).
const LeasePrefix = "ehdb-shard-"

// LeaseName is the name of a shard's Lease: one election per writer process, not per bus, because
// both buses of a writer live on the same ordinal's volumes.
func LeaseName(shard uint32) string {
	return fmt.Sprintf(LeasePrefix+"%08x", shard)
}

// ParseLeaseName decodes a shard Lease name: exactly LeasePrefix followed by 8 lowercase hex
// digits, the form LeaseName writes. Anything else is an error saying why.
func ParseLeaseName(name string) (uint32, error) {
	hex, ok := strings.CutPrefix(name, LeasePrefix)
	if !ok {
		return 0, fmt.Errorf("name does not start with %q", LeasePrefix)
	}
	if len(hex) != 8 {
		return 0, fmt.Errorf("suffix %q is not 8 hex digits", hex)
	}
	for _, c := range hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return 0, fmt.Errorf("suffix %q is not 8 lowercase hex digits", hex)
		}
	}
	n, err := strconv.ParseUint(hex, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("suffix %q: %w", hex, err)
	}
	return uint32(n), nil
}
