package webhook

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Value is what the guard knows about one environment variable of a container: either its exact
// text, or that it cannot be known at admission time and why.
//
// The kubelet builds a container's environment from sources the API server does not hold in the
// object (ConfigMaps, Secrets, the node, the running pod). The guard reads ConfigMaps, because an
// operator commonly keeps feature flags there; it never reads Secrets (it has no right to, and a
// guard that reads every Secret it is shown would be a worse problem than the one it solves).
// Anything it cannot read is Unknown, and the policy treats an Unknown fencing value as armed.
//
// A StatefulSet's pods differ only in their ordinal, and the downward API can hand a container
// values made of it (metadata.name, the pod-index and pod-name labels). Such a value is known per
// ordinal: PerOrdinal is true and Text holds ordinalMark where the ordinal goes (At renders it).
type Value struct {
	Text       string
	Unknown    *Unknown
	PerOrdinal bool
	// Read is true when Text holds content read from a ConfigMap. Messages never quote such a
	// text (shown): a client that can reach the webhook could otherwise read any ConfigMap of a
	// guarded namespace through a crafted review.
	Read bool
}

// shown is v's text quoted for a message, or where it came from when it was read from a
// ConfigMap (Value.Read).
func (v Value) shown(ordinal int64) string {
	if v.Read {
		return "(a value read from a ConfigMap)"
	}
	return strconv.Quote(v.At(ordinal))
}

// ordinalMark stands for the ordinal in a PerOrdinal value's Text. It is a Unicode noncharacter;
// a literal that contains it is refused as unknowable rather than confused with the mark.
const ordinalMark = "\uFFFF"

// Known reports whether the exact value is known (for every ordinal, when PerOrdinal).
func (v Value) Known() bool { return v.Unknown == nil }

// At is the text in the pod of the given ordinal.
func (v Value) At(ordinal int64) string {
	if !v.PerOrdinal {
		return v.Text
	}
	return strings.ReplaceAll(v.Text, ordinalMark, strconv.FormatInt(ordinal, 10))
}

// Unknown says why a value cannot be known. When Pending is non-empty, the value depends only on
// ConfigMaps not read yet; reading them resolves it (to a text or to a definite Unknown).
type Unknown struct {
	Reasons []string // human readable, each names the source, e.g. `Secret "db" (the guard does not read Secrets)`
	Pending []string // names of ConfigMaps whose content is needed
	// more counts reasons left out (maxReasons).
	more int
}

// maxReasons caps the reasons one Unknown keeps: a template with thousands of Secret sources
// must not make every lookup merge thousands of strings.
const maxReasons = 4

func (u *Unknown) merge(o *Unknown) *Unknown {
	if o == nil {
		return u
	}
	if u == nil {
		u = &Unknown{}
	}
	out := &Unknown{
		Reasons: append([]string(nil), u.Reasons...),
		Pending: appendNew(append([]string(nil), u.Pending...), o.Pending...),
		more:    u.more + o.more,
	}
	for _, r := range o.Reasons {
		switch {
		case slices.Contains(out.Reasons, r):
		case len(out.Reasons) < maxReasons:
			out.Reasons = append(out.Reasons, r)
		default:
			out.more++
		}
	}
	return out
}

// appendNew appends the elements of add not in dst yet (dst is small: callers cap it).
func appendNew(dst []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(dst, a) {
			dst = append(dst, a)
		}
	}
	return dst
}

// String renders the reasons for a message.
func (u *Unknown) String() string {
	if u == nil {
		return ""
	}
	parts := append([]string(nil), u.Reasons...)
	for _, p := range u.Pending {
		parts = append(parts, "ConfigMap "+quote(p)+" (not read yet)")
	}
	if u.more > 0 {
		parts = append(parts, strconv.Itoa(u.more)+" more source(s)")
	}
	return strings.Join(parts, "; ")
}

// ConfigMapFact is what a lookup of one ConfigMap returned.
type ConfigMapFact struct {
	Data     map[string]string // .data only: the kubelet never puts .binaryData into the environment
	NotFound bool
	// Changed is when the API server last recorded a change of it (lastChange), zero when it kept
	// no record: a running container read it as it was at its start (started.go).
	Changed time.Time
	Err     error // any other error (forbidden, timeout, ...)
}

// ConfigMapSource answers ConfigMap lookups during resolution; ok=false means "not read yet".
type ConfigMapSource func(name string) (fact ConfigMapFact, ok bool)

// PodContext is what a fieldRef may read: the metadata and spec the pod will have, to the extent
// the object being admitted decides them.
type PodContext struct {
	// Template is true for a workload's pod template, false for a Pod. In a template, fields a
	// controller fills in (the pod's name, uid, labels such as pod-template-hash) are unknowable.
	Template  bool
	Namespace string
	Meta      PodMeta
	Spec      *corev1.PodSpec
	// SetName is set for a StatefulSet's template: its pods are named <SetName>-<ordinal> and
	// carry the pod-index and pod-name labels, so those fields are known per ordinal.
	SetName string
	// ControllerSet lists the label and annotation field paths the controller (kind SetBy) writes
	// on every pod over the template's value (controllerSetKeys): never read from the template.
	ControllerSet map[string]bool
	SetBy         string
	// sinceStart, when set, says why the labels and annotations a running process read at its
	// start cannot be known (electsElsewhere): every fieldRef to them is unknown.
	sinceStart string
}

// PodMeta is the part of the pod's metadata a fieldRef can read.
type PodMeta struct {
	Name        string
	UID         string
	Labels      map[string]string
	Annotations map[string]string
}

// Labels the StatefulSet controller sets on each pod from its ordinal (overriding the template).
const (
	labelPodIndex = "apps.kubernetes.io/pod-index"
	labelPodName  = "statefulset.kubernetes.io/pod-name"
)

// Env is the effective environment of one container as the kubelet would build it.
type Env struct {
	vars map[string]envEntry
	// wild are envFrom sources whose content is unknown (a Secret, a ConfigMap not read yet or not
	// readable), by prefix: any name with the prefix may have been set by them, unless a later
	// definite source (an env entry, a later envFrom) set it again.
	wild map[string]*wildSource
	// wildLens are the distinct lengths of the wild prefixes, so a lookup tries only those.
	wildLens []int
	budget   *Budget
	// names is how the node matches names; when it folds, folded lists the names set under each
	// folded name, and wild is keyed by folded prefix.
	names  envNames
	folded map[string][]string
}

type envEntry struct {
	v     Value
	order int // position of the source that set it: envFrom index, then len(envFrom)+env index
}

type wildSource struct {
	why   *Unknown
	order int // the latest envFrom index of a wild source with this prefix
}

// Budget bounds the work of judging one object, whatever the object says: every step of
// resolving environments spends from it, and once it is spent every value still to be resolved is
// unknowable (so an armed-looking object is refused, never admitted on a guess). The zero Budget
// is spent; NewBudget gives a fresh one.
type Budget struct{ left int64 }

// DefaultBudget is the work one review may do resolving environments: about 16 M steps (bytes
// hashed or compared), tens of milliseconds, whatever the size or shape of the object.
const DefaultBudget = 16 << 20

// NewBudget returns a budget of n steps (DefaultBudget when n <= 0).
func NewBudget(n int64) *Budget {
	if n <= 0 {
		n = DefaultBudget
	}
	return &Budget{left: n}
}

// spend takes n steps; false once the budget is exhausted. A nil budget is unlimited.
func (b *Budget) spend(n int) bool {
	if b == nil {
		return true
	}
	b.left -= int64(n) + 1
	return b.left >= 0
}

// Exhausted reports whether the budget is spent.
func (b *Budget) Exhausted() bool { return b != nil && b.left < 0 }

var errBudget = &Unknown{Reasons: []string{"the object is too complex for the guard to resolve within its per-review work budget"}}

// Lookup returns the variable's value as the container's process sees it, and whether it is set
// (an Unknown value counts as set): by name up to case where the node may match names so
// (envnames.go), and up to the value's first NUL byte.
func (e *Env) Lookup(name string) (Value, bool) {
	if e.names.fold {
		return e.lookupFolded(name)
	}
	v, set := e.lookupExact(name)
	v.Text = asSeen(v.Text)
	return v, set
}

// lookupExact is the kubelet's own view of name: the entry of exactly that name, unless an
// unreadable source after it may have set it. The kubelet expands $(NAME) by it.
func (e *Env) lookupExact(name string) (Value, bool) {
	if !e.budget.spend(len(name)) {
		return Value{Unknown: errBudget}, true
	}
	ent, set := e.vars[name]
	u := e.wildFor(name, func(w *wildSource) bool { return !set || w.order > ent.order })
	switch {
	case u != nil:
		return Value{Unknown: u.merge(ent.v.Unknown)}, true
	case set:
		return ent.v, true
	}
	return Value{}, false
}

// wildFor merges the reasons of the unreadable sources whose prefix begins name (as the node
// compares names) and that counts, or returns nil.
func (e *Env) wildFor(name string, counts func(*wildSource) bool) *Unknown {
	key := e.names.key(name)
	var u *Unknown
	for _, l := range e.wildLens {
		if l > len(key) {
			break
		}
		if !e.budget.spend(l) {
			return errBudget
		}
		if w, ok := e.wild[key[:l]]; ok && counts(w) {
			u = u.merge(w.why)
		}
	}
	return u
}

// lookupFolded is Lookup on a node that may match names regardless of case: every entry whose
// name folds to name's is a candidate, and the process may read any of them; an unreadable
// source may set name in a case no later entry replaces, whatever its order.
func (e *Env) lookupFolded(name string) (Value, bool) {
	if !e.budget.spend(len(name)) {
		return Value{Unknown: errBudget}, true
	}
	variants := e.folded[foldName(name)]
	var exact *Unknown
	for _, n := range variants {
		if v, _ := e.lookupExact(n); !v.Known() {
			exact = exact.merge(v.Unknown)
		}
	}
	if u := e.wildFor(name, func(*wildSource) bool { return true }); u != nil {
		if exact == nil && len(variants) > 0 {
			u = u.merge(&Unknown{Reasons: []string{"it may set " + name + " in another case, which a node not certain to be Linux reads as the same name (set spec.os.name: linux)"}})
		}
		return Value{Unknown: u.merge(exact)}, true
	}
	if exact != nil {
		return Value{Unknown: exact}, true
	}
	switch {
	case len(variants) == 0:
		return Value{}, false
	case len(variants) == 1 && (variants[0] == name || !runtimeSet[name]):
		v := e.vars[variants[0]].v
		v.Text = asSeen(v.Text)
		return v, true
	}
	first := e.vars[variants[0]].v
	for _, n := range variants[1:] {
		if v := e.vars[n].v; asSeen(v.Text) != asSeen(first.Text) || v.PerOrdinal != first.PerOrdinal {
			return e.caseClash(name, variants), true
		}
	}
	if runtimeSet[name] && !slices.Contains(variants, name) {
		return e.caseClash(name, variants), true
	}
	first.Text = asSeen(first.Text)
	return first, true
}

// runtimeSet are the names the container runtime sets itself when the container's env does not
// (HOSTNAME, to the pod's hostname): a variant of another case then stands beside it.
var runtimeSet = map[string]bool{"HOSTNAME": true}

func (e *Env) caseClash(name string, variants []string) Value {
	shown := make([]string, 0, len(variants)+1)
	for _, n := range variants {
		shown = append(shown, quote(n))
	}
	if runtimeSet[name] && !slices.Contains(variants, name) {
		shown = append(shown, quote(name)+" (the runtime's)")
	}
	return unknown(strings.Join(shown, " and ") + " are set differently, and a node not certain to be Linux reads them as one name, any of them (set spec.os.name: linux)")
}

// setByContainer reports whether the container's env, or an envFrom source the guard read, sets
// name: not only a source it cannot read (an envFrom Secret) that may set it.
func (e *Env) setByContainer(name string) bool {
	if e.names.fold {
		return len(e.folded[foldName(name)]) > 0
	}
	_, ok := e.vars[name]
	return ok
}

// Names returns the names set with certainty, sorted (for tests and logs).
func (e *Env) Names() []string {
	out := make([]string, 0, len(e.vars))
	for k := range e.vars {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ResolveEnv builds a container's effective environment exactly as the kubelet does
// (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables, v1.37):
//   - envFrom in order, each ConfigMap's .data copied under its prefix; a missing optional
//     ConfigMap is skipped; Secret sources are unknowable;
//   - then env in order, a later entry replacing an earlier one or an envFrom value;
//   - a literal value has its $(VAR) references expanded against everything set so far ($$ is
//     an escaped $, a reference to an unset variable stays literal);
//   - valueFrom sources are not expanded; an optional configMapKeyRef whose ConfigMap or key is
//     missing leaves the variable as it was (the kubelet skips it), a non-optional one stops the
//     container from starting and is therefore unknowable.
//
// The service-link variables the kubelet adds (FOO_SERVICE_HOST, ...) are not modelled: a
// reference to them stays literal, as the issue prescribes. ResolveEnv has no work bound; the
// guard itself uses resolveEnv with the review's Budget.
func ResolveEnv(c *corev1.Container, pod *PodContext, cms ConfigMapSource) *Env {
	return resolveEnv(c, pod, cms, nil)
}

func resolveEnv(c *corev1.Container, pod *PodContext, cms ConfigMapSource, budget *Budget) *Env {
	e := &Env{vars: map[string]envEntry{}, wild: map[string]*wildSource{}, budget: budget, names: envNamesOf(pod)}
	for i, from := range c.EnvFrom {
		if !budget.spend(len(from.Prefix)) {
			break
		}
		switch {
		case from.ConfigMapRef != nil:
			name := from.ConfigMapRef.Name
			fact, ok := cms(name)
			switch {
			case !ok:
				e.addWild(i, from.Prefix, &Unknown{Pending: []string{name}})
			case fact.Err != nil:
				e.addWild(i, from.Prefix, &Unknown{Reasons: []string{"ConfigMap " + quote(name) + " could not be read: " + fact.Err.Error()}})
			case fact.NotFound:
				// Arms nothing now (see resolveValueFrom).
			default:
				for k, v := range fact.Data {
					if !budget.spend(len(from.Prefix) + len(k)) {
						break
					}
					e.vars[from.Prefix+k] = envEntry{v: Value{Text: v, Read: true}, order: i}
				}
			}
		case from.SecretRef != nil:
			e.addWild(i, from.Prefix, &Unknown{Reasons: []string{"envFrom Secret " + quote(from.SecretRef.Name) + " (the guard does not read Secrets)"}})
		default:
			// A source kind this version does not know: whatever it sets is unknowable.
			e.addWild(i, from.Prefix, &Unknown{Reasons: []string{"an envFrom source of an unknown kind"}})
		}
	}
	base := len(c.EnvFrom)
	for i := range c.Env {
		ev := &c.Env[i]
		if budget.Exhausted() {
			break
		}
		order := base + i
		if ev.Value != "" {
			e.vars[ev.Name] = envEntry{v: expand(ev.Value, e), order: order}
			continue
		}
		if ev.ValueFrom == nil {
			e.vars[ev.Name] = envEntry{order: order}
			continue
		}
		v, set := resolveValueFrom(ev, pod, cms)
		if set {
			e.vars[ev.Name] = envEntry{v: v, order: order}
		}
	}
	if budget.Exhausted() {
		// Whatever was not resolved may be anything.
		e.addWild(base+len(c.Env), "", errBudget)
	}
	if e.names.fold {
		e.folded = make(map[string][]string, len(e.vars))
		for n := range e.vars {
			if !budget.spend(len(n)) {
				e.addWild(base+len(c.Env), "", errBudget)
				break
			}
			k := foldName(n)
			e.folded[k] = append(e.folded[k], n)
		}
		for _, ns := range e.folded {
			sort.Strings(ns)
		}
	}
	return e
}

// addWild records an unknowable envFrom source at position order: every name already set under
// its prefix may now be overridden by it.
func (e *Env) addWild(order int, prefix string, why *Unknown) {
	prefix = e.names.key(prefix)
	w, ok := e.wild[prefix]
	if !ok {
		w = &wildSource{}
		e.wild[prefix] = w
		if i, found := slices.BinarySearch(e.wildLens, len(prefix)); !found {
			e.wildLens = slices.Insert(e.wildLens, i, len(prefix))
		}
	}
	w.why = w.why.merge(why)
	w.order = order
}

// resolveValueFrom resolves one env entry's valueFrom.
//
// A ConfigMap, or a ConfigMap key, that does not exist arms nothing now (issue 17, class 5; the same
// for envFrom). Optional, the kubelet skips it; not optional, the kubelet starts no container that
// needs it (CreateContainerConfigError) until it exists, so nothing runs with a value from it — and
// the ConfigMap create or update that brings it is itself reviewed and judged for every reader
// (handleConfigMap), order check included. A GitOps sync that applies the workload before its
// ConfigMap is therefore not refused, and cannot arm anything unseen.
func resolveValueFrom(ev *corev1.EnvVar, pod *PodContext, cms ConfigMapSource) (Value, bool) {
	src := ev.ValueFrom
	switch {
	case src.FieldRef != nil:
		return fieldRefValue(src.FieldRef, pod), true
	case src.ResourceFieldRef != nil:
		// The kubelet fills in node allocatable where no limit is set; the guard does not model it.
		return unknown("resourceFieldRef " + quote(src.ResourceFieldRef.Resource) + " (decided by the node)"), true
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		fact, ok := cms(ref.Name)
		switch {
		case !ok:
			return Value{Unknown: &Unknown{Pending: []string{ref.Name}}}, true
		case fact.Err != nil:
			return unknown("ConfigMap " + quote(ref.Name) + " could not be read: " + fact.Err.Error()), true
		case fact.NotFound:
			return Value{}, false
		}
		if v, found := fact.Data[ref.Key]; found {
			return Value{Text: v, Read: true}, true
		}
		return Value{}, false
	case src.SecretKeyRef != nil:
		return unknown("Secret " + quote(src.SecretKeyRef.Name) + " key " + quote(src.SecretKeyRef.Key) + " (the guard does not read Secrets)"), true
	case elidedValue(src):
		return unknown("a literal value of over " + strconv.Itoa(keepString) + " bytes in an object of over " + strconv.Itoa(keepWhole) + ", which the webhook's watch does not keep"), true
	default:
		// fileKeyRef (EnvFiles) and anything newer: decided at run time.
		return unknown("a valueFrom source decided at run time"), true
	}
}

func unknown(reason string) Value {
	return Value{Unknown: &Unknown{Reasons: []string{reason}}}
}

// fieldRefValue emulates the kubelet's downward API for env (podFieldSelectorRuntimeValue and
// fieldpath.ExtractFieldPathAsString) to the extent the admitted object decides the answer.
func fieldRefValue(ref *corev1.ObjectFieldSelector, pod *PodContext) Value {
	path := ref.FieldPath
	if ref.APIVersion != "" && ref.APIVersion != "v1" {
		return unknown("fieldRef with apiVersion " + quote(ref.APIVersion))
	}
	if path == "spec.host" {
		path = "spec.nodeName"
	}
	if base, key, ok := splitSubscript(path); ok && base == "metadata.annotations" {
		if v, set := kubeletAnnotation(key); set {
			return v
		}
	}
	if base, _, _ := splitSubscript(path); pod.sinceStart != "" && (base == "metadata.labels" || base == "metadata.annotations") {
		return unknown("fieldRef " + quote(ref.FieldPath) + " (" + pod.sinceStart + ")")
	}
	if base, key, ok := splitSubscript(path); ok {
		var m map[string]string
		switch base {
		case "metadata.labels":
			m = pod.Meta.Labels
		case "metadata.annotations":
			m = pod.Meta.Annotations
		default:
			return unknown("fieldRef " + quote(ref.FieldPath) + " (not supported by the kubelet)")
		}
		if base == "metadata.labels" && pod.SetName != "" {
			// The StatefulSet controller sets these on every pod, over the template's.
			switch key {
			case labelPodIndex:
				return Value{Text: ordinalMark, PerOrdinal: true}
			case labelPodName:
				return Value{Text: pod.SetName + "-" + ordinalMark, PerOrdinal: true}
			}
		}
		if base == "metadata.labels" && topologyLabels[key] && !bound(pod) {
			return unknown("fieldRef " + quote(ref.FieldPath) + " (the API server sets it from the node when the pod is bound: PodTopologyLabels)")
		}
		if pod.Template && pod.ControllerSet[base+"['"+key+"']"] {
			return unknown("fieldRef " + quote(ref.FieldPath) + " (set by the " + pod.SetBy + " controller on each pod, over the template's value)")
		}
		if v, ok := m[key]; ok {
			return Value{Text: v}
		}
		if pod.Template {
			// Controllers add labels (pod-template-hash, statefulset.kubernetes.io/pod-name, ...).
			return unknown("fieldRef " + quote(ref.FieldPath) + " (not set in the template; a controller may set it)")
		}
		return Value{Text: ""}
	}
	switch path {
	case "metadata.namespace":
		return Value{Text: pod.Namespace}
	case "metadata.name":
		if pod.SetName != "" {
			return Value{Text: pod.SetName + "-" + ordinalMark, PerOrdinal: true}
		}
		if pod.Template || pod.Meta.Name == "" {
			return unknown("fieldRef metadata.name (the pod's name is chosen by its controller)")
		}
		return Value{Text: pod.Meta.Name}
	case "metadata.uid":
		if pod.Template || pod.Meta.UID == "" {
			return unknown("fieldRef metadata.uid (assigned when the pod is created)")
		}
		return Value{Text: pod.Meta.UID}
	case "metadata.labels", "metadata.annotations":
		if pod.Template {
			return unknown("fieldRef " + quote(path) + " (a controller may add entries)")
		}
		if path == "metadata.labels" {
			if !bound(pod) {
				return unknown("fieldRef metadata.labels (the API server adds the node's topology labels when the pod is bound: PodTopologyLabels)")
			}
			return Value{Text: formatMap(pod.Meta.Labels)}
		}
		return unknown("fieldRef metadata.annotations (the kubelet adds its own to the pod it runs: " + kubeletConfigSeen + ", the time it first saw it)")
	case "spec.serviceAccountName":
		return Value{Text: ServiceAccountName(pod.Spec)}
	case "spec.nodeName":
		if pod.Spec != nil && pod.Spec.NodeName != "" {
			return Value{Text: pod.Spec.NodeName}
		}
		return unknown("fieldRef spec.nodeName (decided by the scheduler)")
	case "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs":
		return unknown("fieldRef " + quote(path) + " (decided when the pod runs)")
	default:
		return unknown("fieldRef " + quote(ref.FieldPath) + " (not supported by the kubelet)")
	}
}

// topologyLabels are the labels the API server's PodTopologyLabels admission plugin (on by default
// since 1.35) copies from the node onto a pod when it is bound, over any value the pod had: it adds
// them to the Binding, and binding copies a Binding's labels onto the Pod (pkg/registry/core/pod/
// storage). A pod created on a node gets them at creation, before any webhook sees it.
// The annotations the kubelet sets on its own copy of every Pod, which is the copy the downward
// API reads (pkg/kubelet/config: localAnnotations): whatever the object says, the source is "api"
// for a Pod from the API server (every Pod admission sees), and first-seen is the instant the
// kubelet first saw it. A mirror annotation makes the kubelet take the Pod for a static Pod's
// mirror. Red team I set config.source to "0" and read the shard from it:
// the guard judged shard 0, live; the process read "api", no shard, armed.
const (
	kubeletConfigSource = "kubernetes.io/config.source"
	kubeletConfigSeen   = "kubernetes.io/config.seen"
	kubeletConfigMirror = "kubernetes.io/config.mirror"
)

// kubeletAnnotation is the value a fieldRef of annotation key reads when the kubelet sets it
// (set is false for every other key).
func kubeletAnnotation(key string) (v Value, set bool) {
	switch key {
	case kubeletConfigSource:
		return Value{Text: "api"}, true
	case kubeletConfigSeen:
		return unknown("fieldRef of annotation " + quote(key) + " (the kubelet sets it to the time it first sees the pod)"), true
	case kubeletConfigMirror:
		return unknown("fieldRef of annotation " + quote(key) + " (the kubelet's own, for the mirror of a static pod)"), true
	}
	return Value{}, false
}

var topologyLabels = map[string]bool{"topology.kubernetes.io/zone": true, "topology.kubernetes.io/region": true}

// bound reports whether pod is a Pod already on its node: its labels are then the ones it runs with.
func bound(pod *PodContext) bool {
	return !pod.Template && pod.Spec != nil && pod.Spec.NodeName != ""
}

// ServiceAccountName is the ServiceAccount the pod will run as: spec.serviceAccountName, else the
// deprecated spec.serviceAccount, else "default" (what the ServiceAccount admission plugin sets).
func ServiceAccountName(spec *corev1.PodSpec) string {
	if spec == nil {
		return "default"
	}
	if spec.ServiceAccountName != "" {
		return spec.ServiceAccountName
	}
	if spec.DeprecatedServiceAccount != "" {
		return spec.DeprecatedServiceAccount
	}
	return "default"
}

// splitSubscript is fieldpath.SplitMaybeSubscriptedPath: "metadata.labels['k']" → ("metadata.labels", "k").
func splitSubscript(p string) (string, string, bool) {
	if !strings.HasSuffix(p, "']") {
		return p, "", false
	}
	s := strings.TrimSuffix(p, "']")
	base, key, ok := strings.Cut(s, "['")
	if !ok || base == "" {
		return p, "", false
	}
	return base, key, true
}

// formatMap is fieldpath.FormatMap: sorted key="quoted value" lines.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	return b.String()
}
