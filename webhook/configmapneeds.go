package webhook

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// guardReadPrefix and guardReadNames are every variable the guard and election.ParseConfig read
// from a container's environment (the fencing switch, the election's settings, the shard's
// HOSTNAME fallback, the namespace's POD_NAMESPACE fallback, and the API server's address that
// client-go's in-cluster configuration dials); anything else matters only when one of them
// refers to it with $(NAME). TestConfigMapNeedsCoverWhatTheParserReads pins this.
const guardReadPrefix = "NOETL_"

var guardReadNames = append([]string{"HOSTNAME", "POD_NAMESPACE"}, apiServerVars...)

// keyFilter says which keys of one ConfigMap can change what the guard decides for the review's
// workloads: a key another container reads under a name the guard reads (envFrom under its
// prefix, or a configMapKeyRef), nothing else. The guard reads only these, so a ConfigMap of
// 1 MB whose one relevant key is absent costs it a few bytes, not a megabyte.
type keyFilter struct {
	prefixes []string        // envFrom prefixes the ConfigMap is read under
	names    map[string]bool // variable names that matter besides guardReadPrefix/guardReadNames
	keys     map[string]bool // keys read by configMapKeyRef into a variable that matters
}

// keep reports whether the key can matter.
func (f *keyFilter) keep(key string) bool {
	if f == nil {
		return true
	}
	if f.keys[key] {
		return true
	}
	for _, p := range f.prefixes {
		if matters(p+key, f.names) {
			return true
		}
	}
	return false
}

// signature identifies the filter, so that concurrent reads of one ConfigMap with the same
// needs can share one GET.
func (f *keyFilter) signature() string {
	if f == nil {
		return "*"
	}
	var b strings.Builder
	for _, set := range []map[string]bool{f.names, f.keys} {
		ks := make([]string, 0, len(set))
		for k := range set {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		b.WriteString(strings.Join(ks, "\x00"))
		b.WriteByte('\x01')
	}
	ps := append([]string(nil), f.prefixes...)
	sort.Strings(ps)
	b.WriteString(strings.Join(ps, "\x00"))
	return b.String()
}

// Names are compared up to case: on a node that matches them so (envnames.go), noetl_ehdb_fencing
// is the fencing switch.
func matters(name string, names map[string]bool) bool {
	if mayHavePrefix(name, guardReadPrefix) || names[name] {
		return true
	}
	for _, n := range guardReadNames {
		if mayBeName(n, name) {
			return true
		}
	}
	return false
}

// envSources is one container's env and envFrom, whatever kind of container it is.
type envSources struct {
	env     []corev1.EnvVar
	envFrom []corev1.EnvFromSource
}

func containerSources(ws ...*Workload) []envSources {
	var out []envSources
	for _, w := range ws {
		if w == nil || w.Pod.Spec == nil {
			continue
		}
		for _, c := range w.Containers() {
			out = append(out, envSources{c.Env, c.EnvFrom})
		}
		for i := range w.Pod.Spec.EphemeralContainers {
			c := &w.Pod.Spec.EphemeralContainers[i].EphemeralContainerCommon
			out = append(out, envSources{c.Env, c.EnvFrom})
		}
	}
	return out
}

// configMapNeeds is, for every ConfigMap the workloads' containers read, the keys that can matter.
// The names that matter in a container are those the guard reads plus every $(NAME) any literal
// value of that container refers to: more than needed, never less.
func configMapNeeds(ws ...*Workload) map[string]*keyFilter {
	out := map[string]*keyFilter{}
	get := func(cm string) *keyFilter {
		f, ok := out[cm]
		if !ok {
			f = &keyFilter{names: map[string]bool{}, keys: map[string]bool{}}
			out[cm] = f
		}
		return f
	}
	for _, c := range containerSources(ws...) {
		names := map[string]bool{}
		for _, e := range c.env {
			for _, ref := range references(e.Value) {
				names[ref] = true
			}
		}
		for _, from := range c.envFrom {
			if from.ConfigMapRef == nil {
				continue
			}
			f := get(from.ConfigMapRef.Name)
			f.prefixes = appendNew(f.prefixes, from.Prefix)
			for n := range names {
				f.names[n] = true
			}
		}
		for _, e := range c.env {
			if e.Value == "" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && matters(e.Name, names) {
				get(e.ValueFrom.ConfigMapKeyRef.Name).keys[e.ValueFrom.ConfigMapKeyRef.Key] = true
			}
		}
	}
	return out
}

// references lists the NAMEs of every "$(NAME)" in s, escaped or not (a superset of what
// expand looks up).
func references(s string) []string {
	var out []string
	for {
		i := strings.Index(s, "$(")
		if i < 0 {
			return out
		}
		s = s[i+2:]
		end := strings.IndexByte(s, ')')
		if end < 0 {
			return out
		}
		out = append(out, s[:end])
		s = s[end+1:]
	}
}
