package webhook

import (
	"fmt"

	"strings"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// electionView is what the shared election parser makes of an armed container's environment.
type electionView struct {
	enabledText Value // NOETL_EHDB_ELECTION as resolved
	enabledSet  bool
	enabled     bool
	problems    []error
	namespace   Value // where the Lease lives
	// namespaceFromFile is true when the environment names no namespace: the election then reads
	// the ServiceAccount namespace file (credentials.go judges what is mounted there).
	namespaceFromFile bool
	shards            []uint32
	shardProblem      string // why the shards cannot be told ("" when shards is complete)
	// shardCertain is true when shardProblem is certain to stop the election (it declines to
	// run without a shard), rather than only keeping the guard from telling the shard.
	shardCertain bool
	// tooMany is the replica count when the shards come from more ordinals than the guard
	// judges (Policy.MaxShards); shards is then empty.
	tooMany int32
}

// firstSet returns the first of names that is set the way election.ParseConfig sees it: a known
// value that is not blank, or an unknowable one (which might be anything).
func firstSet(lookup func(string) (Value, bool), names ...string) (string, Value, bool) {
	for _, n := range names {
		if v, ok := lookup(n); ok && (!v.Known() || strings.TrimSpace(v.Text) != "") {
			return n, v, true
		}
	}
	return "", Value{}, false
}

// judgeElection parses a container's environment with election.ParseConfig (the writer's own
// parser) and works out which Leases its pods will elect on. Only what the parser cannot see is
// decided here: which values are unknowable, and the HOSTNAME and per-ordinal fields each pod of
// a StatefulSet will have. At most maxShards ordinals are judged.
func judgeElection(w *Workload, env *Env, maxShards int) electionView {
	var ev electionView
	type looked struct {
		v  Value
		ok bool
	}
	memo := map[string]looked{}
	lookup := func(name string) (Value, bool) {
		if l, ok := memo[name]; ok {
			return l.v, l.ok
		}
		v, ok := env.Lookup(name)
		if v.PerOrdinal && name != electionenv.EnvShard && name != "HOSTNAME" {
			// Only the shard is meant to vary by ordinal; anything else that does is not judged.
			v = Value{Unknown: &Unknown{Reasons: []string{name + " differs from pod to pod (it is made of the ordinal)"}}}
		}
		memo[name] = looked{v, ok}
		return v, ok
	}
	// getenv is the environment of the pod of the given ordinal (-1: per-ordinal values unset).
	getenv := func(ordinal int64, hostname string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			v, ok := lookup(name)
			if name == "HOSTNAME" && !ok && hostname != "" {
				return hostname, true
			}
			if !ok || !v.Known() || (v.PerOrdinal && ordinal < 0) {
				return "", false
			}
			return v.At(ordinal), true
		}
	}
	cfg, problems := electionenv.Parse(getenv(-1, ""))
	ev.problems = unquoted(problems, lookup)
	_, ev.enabledText, ev.enabledSet = firstSet(lookup, electionenv.EnvElection)
	ev.enabled = cfg.Enabled && ev.enabledSet && ev.enabledText.Known()

	// The Lease's namespace: NOETL_EHDB_ELECTION_NAMESPACE, else POD_NAMESPACE, else the
	// ServiceAccount namespace file, which is the pod's namespace.
	switch name, v, ok := firstSet(lookup, electionenv.EnvNamespace, "POD_NAMESPACE"); {
	case !ok:
		ev.namespace, ev.namespaceFromFile = Value{Text: w.Namespace}, true
	case !v.Known():
		ev.namespace = Value{Unknown: &Unknown{Reasons: []string{name + ": " + v.Unknown.String()}}}
	default:
		ev.namespace = Value{Text: cfg.Namespace}
	}

	// The shard: NOETL_EHDB_ELECTION_SHARD, else the ordinal at the end of $HOSTNAME, which the
	// container may set itself and otherwise is the pod's hostname.
	name, v, ok := firstSet(lookup, electionenv.EnvShard, "HOSTNAME")
	switch {
	case ok && !v.Known():
		ev.shardProblem = name + " cannot be known (" + v.Unknown.String() + ")"
		return ev
	case ok && !v.PerOrdinal:
		c, _ := electionenv.Parse(getenv(-1, ""))
		if c.HasShard {
			ev.shards = []uint32{c.Shard}
			return ev
		}
		ev.shardCertain = true
		ev.shardProblem = fmt.Sprintf("%s=%s gives the election no shard, so it would not run", name, v.shown(-1))
		if msg := problemsAbout(problems, name); msg != "" && !v.Read {
			ev.shardProblem += " (" + msg + ")"
		}
		return ev
	case w.Kind != gvkStatefulSet.Kind:
		// One pod, or pods that all share one hostname: the kubelet's (runs.go).
		host, why := podHostname(w, -1)
		if why != "" {
			ev.shardProblem = "the shard comes from the pod's hostname, and " + why
			return ev
		}
		if c, _ := electionenv.Parse(getenv(-1, host)); c.HasShard {
			ev.shards = []uint32{c.Shard}
			return ev
		}
		ev.shardCertain = true
		ev.shardProblem = fmt.Sprintf("the pod hostname %q gives the election no shard, so it would not run", host)
		return ev
	}
	// One shard per ordinal: from the pod's hostname, or from a per-ordinal field.
	if w.Replicas > 0 && int64(w.Replicas) > int64(maxShards) {
		ev.tooMany = w.Replicas
		return ev
	}
	for i := int64(0); i < int64(w.Replicas); i++ {
		ordinal := int64(w.OrdinalStart) + i
		host := ""
		if !ok {
			var why string
			if host, why = podHostname(w, ordinal); why != "" {
				ev.shardProblem = "the shard comes from the pod's hostname, and " + why
				ev.shards = nil
				return ev
			}
		}
		c, ps := electionenv.Parse(getenv(ordinal, host))
		if !c.HasShard {
			ev.shardCertain = true
			if ok {
				ev.shardProblem = fmt.Sprintf("in the pod of ordinal %d, %s=%s gives the election no shard, so it would not run", ordinal, name, v.shown(ordinal))
				if msg := problemsAbout(ps, name); msg != "" && !v.Read {
					ev.shardProblem += " (" + msg + ")"
				}
			} else {
				ev.shardProblem = fmt.Sprintf("the pod hostname %q gives the election no shard, so it would not run", host)
			}
			ev.shards = nil
			return ev
		}
		ev.shards = append(ev.shards, c.Shard)
	}
	return ev
}

// electionVariables are the variables election.ParseConfig reads, longest first (a problem about
// NOETL_EHDB_ELECTION_SHARD also contains NOETL_EHDB_ELECTION).
var electionVariables = []string{electionenv.EnvLeaseSecs, electionenv.EnvRenewSecs, electionenv.EnvNamespace, electionenv.EnvShard, electionenv.EnvElection, "POD_NAMESPACE", "HOSTNAME"}

// unquoted replaces each parser problem about a variable whose value was read from a ConfigMap
// with one that does not quote it (Value.Read): the parser's own messages quote the value.
func unquoted(problems []error, lookup func(string) (Value, bool)) []error {
	out := make([]error, len(problems))
	for i, p := range problems {
		out[i] = p
		for _, name := range electionVariables {
			if !strings.Contains(p.Error(), name) {
				continue
			}
			if v, ok := lookup(name); ok && v.Read {
				out[i] = fmt.Errorf("%s: the value read from a ConfigMap is not one the election accepts (the guard does not quote ConfigMap values)", name)
			}
			break
		}
	}
	return out
}

// problemsAbout joins the parser's problems that mention name.
func problemsAbout(problems []error, name string) string {
	var out []string
	for _, p := range problems {
		if strings.Contains(p.Error(), name) {
			out = append(out, p.Error())
		}
	}
	return strings.Join(out, "; ")
}
