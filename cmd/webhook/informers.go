package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"github.com/noetl/ehdb-election/webhook"
)

// watchHealth follows one informer's list and watch calls: broken from the moment one fails until
// one succeeds again. A reflector whose watch breaks retries with backoff; until a call gets
// through, the cache it feeds trails the cluster by an unknown amount, so the replica is not ready.
type watchHealth struct {
	mu      sync.Mutex
	what    string
	okAt    time.Time
	errAt   time.Time
	lastErr error
	callAt  time.Time // a list or watch call in progress since
}

// stuckAfter is how long a list or watch call may go unanswered before the watch counts as
// broken: client-go retries a call whose connection fails inside the call, so a partition from the
// API server shows as a call that does not return rather than as an error.
const stuckAfter = 10 * time.Second

// calling notes a list or watch call starting; note its end.
func (h *watchHealth) calling() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.callAt = time.Now()
}

func (h *watchHealth) note(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	h.callAt = time.Time{}
	if err == nil {
		h.okAt = now
		return
	}
	if errors.Is(err, context.Canceled) {
		return // shutting down
	}
	h.errAt, h.lastErr = now, err
}

func (h *watchHealth) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.errAt.IsZero() && !h.okAt.After(h.errAt) {
		return fmt.Errorf("the %s watch is broken since %s: %v", h.what, h.errAt.UTC().Format(time.RFC3339), h.lastErr)
	}
	if !h.callAt.IsZero() && time.Since(h.callAt) > stuckAfter {
		return fmt.Errorf("the %s watch is broken: the API server has not answered its list or watch since %s", h.what, h.callAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// confirmAfter is how long a watch must stay open (or deliver an event) to count as working.
// client-go answers a watch whose connection keeps failing with an empty watch and no error, and
// that one closes at once.
const confirmAfter = time.Second

// observedWatch forwards a watch's events and reports its health: working once it delivers an
// event or stays open for confirmAfter, broken when it ends before that.
type observedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func observe(w watch.Interface, h *watchHealth) watch.Interface {
	o := &observedWatch{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(o.out)
		timer := time.NewTimer(confirmAfter)
		defer timer.Stop()
		confirmed := false
		confirm := func() {
			if !confirmed {
				confirmed = true
				h.note(nil)
			}
		}
		in := w.ResultChan()
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					if !confirmed {
						h.note(errors.New("the watch ended as soon as it began (is the API server reachable?)"))
					}
					return
				}
				confirm()
				select {
				case o.out <- ev:
				case <-o.stop:
					return
				}
			case <-timer.C:
				confirm()
			case <-o.stop:
				return
			}
		}
	}()
	return o
}

func (o *observedWatch) Stop() {
	o.once.Do(func() { close(o.stop); o.inner.Stop() })
}

func (o *observedWatch) ResultChan() <-chan watch.Event { return o.out }

// watched is one informer: its kind in one namespace ("" for all).
type watched struct {
	informer toolscache.SharedIndexInformer
	health   *watchHealth
}

// trusted says why what the watch holds cannot be trusted (not synced yet, or its list or watch
// broken), or nil: readiness and the reviews that read the watches ask it alike.
func (x *watched) trusted() error {
	if !x.informer.HasSynced() {
		return fmt.Errorf("the %s watch has not synced yet", x.health.what)
	}
	return x.health.check()
}

// kindClient lists and watches one kind in one namespace.
type kindClient struct {
	name  string
	obj   runtime.Object
	list  func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error)
	watch func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error)
}

func leaseClient(cs kubernetes.Interface) kindClient {
	return kindClient{"leases", &coordinationv1.Lease{},
		func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoordinationV1().Leases(ns).List(ctx, o)
		},
		func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoordinationV1().Leases(ns).Watch(ctx, o)
		}}
}

// readerClients are the workload kinds whose pod templates may read a ConfigMap: the rows of
// webhook.PodSources marked Reader, listed and watched through their group's REST client, so a
// kind added to the table is watched without another edit here.
func readerClients(cs kubernetes.Interface) []kindClient {
	var out []kindClient
	for _, src := range webhook.PodSources {
		if !src.Reader {
			continue
		}
		rc := restClientFor(cs, src.GVK.Group)
		resource := src.Resource
		out = append(out, kindClient{resource, src.New(),
			func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
				return rc.Get().Namespace(ns).Resource(resource).VersionedParams(&o, scheme.ParameterCodec).Do(ctx).Get()
			},
			func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
				o.Watch = true
				return rc.Get().Namespace(ns).Resource(resource).VersionedParams(&o, scheme.ParameterCodec).Watch(ctx)
			}})
	}
	return out
}

// restClientFor is the typed clientset's REST client of an API group the pod sources live in.
func restClientFor(cs kubernetes.Interface, group string) rest.Interface {
	switch group {
	case "apps":
		return cs.AppsV1().RESTClient()
	case "batch":
		return cs.BatchV1().RESTClient()
	case "":
		return cs.CoreV1().RESTClient()
	}
	panic("webhook.PodSources names group " + group + ", which readerClients has no client for")
}

// newWatched builds an informer of k in ns whose every list and watch call reports to its health.
func newWatched(k kindClient, ns string, indexers toolscache.Indexers, transform toolscache.TransformFunc, log logr.Logger) (*watched, error) {
	what := k.name
	if ns != "" {
		what += " in " + ns
	}
	h := &watchHealth{what: what}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			h.calling()
			obj, err := k.list(ctx, ns, o)
			h.note(err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			h.calling()
			w, err := k.watch(ctx, ns, o)
			if err != nil {
				h.note(err)
				return nil, err
			}
			return observe(w, h), nil
		},
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, k.obj, toolscache.SharedIndexInformerOptions{Indexers: indexers, ObjectDescription: what})
	if err := inf.SetTransform(transform); err != nil {
		return nil, err
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *toolscache.Reflector, err error) {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return // a normal relist
		}
		h.note(err)
		log.Info("watch failed; retrying", "what", what, "error", err.Error())
	}); err != nil {
		return nil, err
	}
	return &watched{informer: inf, health: h}, nil
}

// guardedScopes is where informers run: each guarded namespace, or "" (all) for ["*"].
func guardedScopes(namespaces []string) []string {
	for _, n := range namespaces {
		if n == "*" {
			return []string{""}
		}
	}
	return namespaces
}

// watches are the webhook's informers: Leases (the order check) and the workloads that may read a
// ConfigMap (ConfigMap reviews), each in every guarded namespace.
type watches struct {
	all     []*watched
	leases  map[string]*watched
	readers webhook.ScopedReaders
	// byKind: resource ("deployments") -> scope ("" = all namespaces) -> informer.
	byKind map[string]map[string]*watched
	cs     kubernetes.Interface
	// scope compares the webhook configuration's namespaces with the watches (checkScope).
	scope *scopeCheck
	log   logr.Logger
	// renewedAt is when this process saw each Lease ("ns/name") renew (LastRenewal).
	renewMu   sync.Mutex
	renewedAt map[string]time.Time
	// rbac are the metadata watches of RBAC and ServiceAccounts; changes counts what they saw
	// (Generation).
	rbac    []*watched
	changes atomic.Uint64
}

func newWatches(cs kubernetes.Interface, mc metadata.Interface, namespaces []string, withLeases bool, log logr.Logger) (*watches, error) {
	w := &watches{leases: map[string]*watched{}, byKind: map[string]map[string]*watched{}, cs: cs, log: log, renewedAt: map[string]time.Time{}}
	w.readers.Namespaces, w.readers.Readers = guardedScopes(namespaces), webhook.IndexReaders(nil)
	if mc != nil {
		if err := w.watchRBAC(mc, namespaces, log); err != nil {
			return nil, err
		}
	}
	for _, ns := range guardedScopes(namespaces) {
		if withLeases {
			l, err := newWatched(leaseClient(cs), ns, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}, shardLeasesOnly, log)
			if err != nil {
				return nil, err
			}
			if _, err := l.informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
				AddFunc: func(obj any, initial bool) {
					if !initial { // created while watched: its acquisition is a renewal seen
						w.noteRenewal(nil, obj)
					}
				},
				UpdateFunc: w.noteRenewal,
				DeleteFunc: w.forgetRenewal,
			}); err != nil {
				return nil, err
			}
			w.leases[ns] = l
			w.all = append(w.all, l)
		}
		for _, k := range readerClients(cs) {
			r, err := newWatched(k, ns, toolscache.Indexers{webhook.ConfigMapIndex: webhook.IndexByConfigMap, webhook.ServiceAccountIndex: webhook.IndexByServiceAccount}, webhook.StripForReaders, log)
			if err != nil {
				return nil, err
			}
			idx, _ := w.readers.Readers.(webhook.IndexReaders)
			w.readers.Readers = append(idx, r.informer.GetIndexer())
			w.all = append(w.all, r)
			if w.byKind[k.name] == nil {
				w.byKind[k.name] = map[string]*watched{}
			}
			w.byKind[k.name][ns] = r
		}
	}
	return w, nil
}

// run starts every informer and stops them when ctx is done.
func (w *watches) run(ctx context.Context) error {
	w.logScope(ctx)
	var wg sync.WaitGroup
	for _, x := range append(slices.Clone(w.all), w.rbac...) {
		wg.Add(1)
		go func() { defer wg.Done(); x.informer.RunWithContext(ctx) }()
	}
	wg.Wait()
	return nil
}

// ready is the readiness check: every informer has synced and none has a broken list or watch.
func (w *watches) ready(*http.Request) error {
	var problems []string
	for _, x := range w.all {
		if err := x.trusted(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if w.scope != nil {
		if err := w.scope.check(context.Background()); err != nil && !errors.As(err, new(*unreadableScope)) {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

var _ webhook.Owners = (*watches)(nil)

// Owner implements webhook.Owners from the reader watches (Deployments and CronJobs among them),
// falling back to a GET when the watch has not seen the object (it may have been created a moment
// ago, and its controller is already creating the ReplicaSet or Job). Anything it cannot tell is
// unknown, and an unknown owner exempts nothing. A cached object with another UID than the one
// named is read again too: the name may have been deleted and created anew a moment ago (an
// orphaning delete and re-create of a StatefulSet), and its controller already makes Pods. So is a
// cached owner that runs no pods (webhook.Workload.NoPods): it exempts no child that runs them,
// and it may have been scaled up or resumed a moment ago, its controller already acting on it;
// likewise a paused Deployment, which exempts no ReplicaSet created under it.
func (w *watches) Owner(namespace string, ref metav1.OwnerReference) (*webhook.Workload, bool, bool) {
	src, ok := webhook.SourceOfKind(ref.Kind)
	if !ok || !src.Reader {
		return nil, false, false
	}
	// Workload already reads one the watch has not seen with a GET.
	wl, found, known := w.Workload(src.Resource, namespace, ref.Name)
	if !known || !found {
		return nil, false, known
	}
	if types.UID(wl.UID) != ref.UID || wl.NoPods != "" || wl.Paused {
		if wl, found, known = w.get(src.Resource, namespace, ref.Name); !found {
			return nil, false, known
		}
	}
	if types.UID(wl.UID) != ref.UID {
		return nil, false, true
	}
	return wl, true, true
}

// leaseLister answers the resolver's Lease reads from the namespace's informer. A namespace not
// watched answers NotFound, which makes the resolver fall back to a GET.
type leaseLister struct{ w *watches }

var _ coordinationlisters.LeaseLister = leaseLister{}

func (l leaseLister) of(ns string) coordinationlisters.LeaseLister {
	if x, ok := l.w.leases[ns]; ok {
		return coordinationlisters.NewLeaseLister(x.informer.GetIndexer())
	}
	if x, ok := l.w.leases[""]; ok {
		return coordinationlisters.NewLeaseLister(x.informer.GetIndexer())
	}
	return nil
}

func (l leaseLister) List(sel labels.Selector) ([]*coordinationv1.Lease, error) {
	var out []*coordinationv1.Lease
	for _, x := range l.w.leases {
		got, err := coordinationlisters.NewLeaseLister(x.informer.GetIndexer()).List(sel)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

func (l leaseLister) Leases(ns string) coordinationlisters.LeaseNamespaceLister {
	if ll := l.of(ns); ll != nil {
		return ll.Leases(ns)
	}
	return notWatched{}
}

type notWatched struct{}

func (notWatched) List(labels.Selector) ([]*coordinationv1.Lease, error) { return nil, nil }
func (notWatched) Get(name string) (*coordinationv1.Lease, error) {
	return nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), name)
}

var _ webhook.Workloads = (*watches)(nil)

// watchOf is the reader watch of resource that covers namespace: its own, or the one of every
// namespace.
func (w *watches) watchOf(resource, namespace string) (*watched, bool) {
	scopes := w.byKind[resource]
	if x, ok := scopes[namespace]; ok {
		return x, true
	}
	x, ok := scopes[""]
	return x, ok
}

// Workload implements webhook.Workloads from the reader watches: the object as the watch last saw
// it, or, when the watch has not seen it, as a GET finds it (a Pod the scheduler binds a moment
// after it was created). known is false when the kind is not watched in that namespace.
func (w *watches) Workload(resource, namespace, name string) (*webhook.Workload, bool, bool) {
	x, ok := w.watchOf(resource, namespace)
	if !ok {
		return nil, false, false
	}
	obj, found, err := x.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, false, false
	}
	if !found {
		return w.get(resource, namespace, name)
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, false, false
	}
	wl, err := webhook.WorkloadOf(ro.DeepCopyObject(), namespace)
	if err != nil {
		return nil, false, false
	}
	return wl, true, true
}

// get reads one object of a watched kind from the API server.
func (w *watches) get(resource, namespace, name string) (*webhook.Workload, bool, bool) {
	i := slices.IndexFunc(webhook.PodSources, func(s webhook.PodSource) bool { return s.Resource == resource })
	if i < 0 {
		return nil, false, false
	}
	src := webhook.PodSources[i]
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	obj, err := restClientFor(w.cs, src.GVK.Group).Get().Namespace(namespace).Resource(resource).Name(name).Do(ctx).Get()
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, true
	case err != nil:
		return nil, false, false
	}
	wl, err := webhook.WorkloadOf(obj, namespace)
	if err != nil {
		return nil, false, false
	}
	return wl, true, true
}

var _ webhook.Revisions = (*watches)(nil)

// RevisionTemplate implements webhook.Revisions with a GET: it is asked only for a StatefulSet's
// Pod that is not its set's template, mid-rollout, so a watch of every revision is not worth it.
func (w *watches) RevisionTemplate(namespace, name string, owner types.UID) (*corev1.PodTemplateSpec, bool, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rev, err := w.cs.AppsV1().ControllerRevisions(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, true
	case err != nil:
		return nil, false, false
	}
	if ref := metav1.GetControllerOfNoCopy(rev); ref == nil || ref.UID != owner {
		return nil, false, true
	}
	tmpl, err := webhook.StatefulSetRevisionTemplate(rev)
	if err != nil {
		return nil, false, false
	}
	return tmpl, true, true
}

var _ webhook.OwnedWorkloads = (*watches)(nil)

// OwnedBy implements webhook.OwnedWorkloads from the reader watches: the objects of resource in
// namespace whose controller has the UID owner (a paused Deployment's ReplicaSets, when it is
// resumed). known is false when the kind is not watched there or its watch is not trusted.
func (w *watches) OwnedBy(resource, namespace string, owner types.UID) ([]*webhook.Workload, bool) {
	x, ok := w.watchOf(resource, namespace)
	if !ok || x.trusted() != nil {
		return nil, false
	}
	var out []*webhook.Workload
	for _, obj := range x.informer.GetStore().List() {
		o, ok := obj.(metav1.Object)
		if !ok || o.GetNamespace() != namespace {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(o); ref == nil || ref.UID != owner {
			continue
		}
		ro, ok := obj.(runtime.Object)
		if !ok {
			continue
		}
		if wl, err := webhook.WorkloadOf(ro.DeepCopyObject(), namespace); err == nil {
			out = append(out, wl)
		}
	}
	return out, true
}

var _ webhook.RenewalClock = (*watches)(nil)

// noteRenewal records, on this process's clock, a Lease update whose renewTime changed (the
// holder renewed), or a Lease created while watched (its acquisition). The initial list is no
// renewal: a Lease whose holder died an hour ago looks the same then.
func (w *watches) noteRenewal(oldObj, newObj any) {
	o, _ := oldObj.(*coordinationv1.Lease)
	n, ok := newObj.(*coordinationv1.Lease)
	if !ok || n.Spec.RenewTime == nil || (o != nil && o.Spec.RenewTime != nil && o.Spec.RenewTime.Equal(n.Spec.RenewTime)) {
		return
	}
	w.renewMu.Lock()
	defer w.renewMu.Unlock()
	w.renewedAt[n.Namespace+"/"+n.Name] = time.Now()
}

// forgetRenewal drops a deleted Lease's record, so the map holds only Leases that exist.
func (w *watches) forgetRenewal(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		w.renewMu.Lock()
		defer w.renewMu.Unlock()
		delete(w.renewedAt, l.Namespace+"/"+l.Name)
	}
}

// LastRenewal implements webhook.RenewalClock.
func (w *watches) LastRenewal(namespace, name string) (time.Time, bool) {
	w.renewMu.Lock()
	defer w.renewMu.Unlock()
	at, ok := w.renewedAt[namespace+"/"+name]
	return at, ok
}

// rbacResources are what a cached positive answer rests on: the RBAC objects that grant lease
// access, and the ServiceAccounts (namespaced in the guarded namespaces, or cluster-scoped).
var rbacResources = []struct {
	gvr     schema.GroupVersionResource
	cluster bool
}{
	{rbacv1.SchemeGroupVersion.WithResource("clusterroles"), true},
	{rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"), true},
	{rbacv1.SchemeGroupVersion.WithResource("roles"), false},
	{rbacv1.SchemeGroupVersion.WithResource("rolebindings"), false},
	{corev1.SchemeGroupVersion.WithResource("serviceaccounts"), false},
}

// watchRBAC starts metadata-only watches (no rules, no subjects kept) of rbacResources: any change
// they see after their first list raises the generation, which drops the resolver's positive
// cache (webhook.ForgetOnChange).
func (w *watches) watchRBAC(mc metadata.Interface, namespaces []string, log logr.Logger) error {
	bump := func() { w.changes.Add(1) }
	for _, r := range rbacResources {
		scopes := guardedScopes(namespaces)
		if r.cluster {
			scopes = []string{""}
		}
		for _, ns := range scopes {
			res := mc.Resource(r.gvr)
			k := kindClient{r.gvr.Resource, &metav1.PartialObjectMetadata{},
				func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
					return res.Namespace(ns).List(ctx, o)
				},
				func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
					return res.Namespace(ns).Watch(ctx, o)
				}}
			x, err := newWatched(k, ns, toolscache.Indexers{}, identityOnly, log)
			if err != nil {
				return err
			}
			if _, err := x.informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
				AddFunc:    func(_ any, initial bool) { bump() },
				UpdateFunc: func(any, any) { bump() },
				DeleteFunc: func(any) { bump() },
			}); err != nil {
				return err
			}
			// Not in readiness: a broken RBAC watch only turns the positive cache off (Generation).
			w.rbac = append(w.rbac, x)
		}
	}
	return nil
}

// identityOnly is the RBAC watches' transform: they only count changes, so their caches keep
// each object's name, namespace, UID and resourceVersion, not its annotations (up to 256 KiB
// each, a namespace admin's to write on every Role, RoleBinding and ServiceAccount), labels or
// managedFields.
func identityOnly(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}}, nil
}

// shardLeasesOnly is the Lease watches' transform. The order check reads only shard Leases
// (electionenv.LeaseName), and only their spec: every other Lease of a guarded namespace is kept
// as its identity alone, and none keeps its annotations, labels or managedFields. A namespace
// admin may create as many Leases as she likes, each with 256 KiB of annotations and a holder
// identity of any length.
func shardLeasesOnly(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	kept := &coordinationv1.Lease{TypeMeta: l.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: l.Name, Namespace: l.Namespace, UID: l.UID, ResourceVersion: l.ResourceVersion, CreationTimestamp: l.CreationTimestamp}}
	if _, err := electionenv.ParseLeaseName(l.Name); err == nil {
		kept.Spec = l.Spec
	}
	return kept, nil
}

var _ webhook.Generation = (*watches)(nil)

// Generation implements webhook.Generation: the changes the RBAC watches saw, and whether every
// one of them has synced and works (a broken watch could hide a change, so nothing is cached then).
func (w *watches) Generation() (uint64, bool) {
	if len(w.rbac) == 0 {
		return 0, false
	}
	for _, x := range w.rbac {
		if !x.informer.HasSynced() || x.health.check() != nil {
			return 0, false
		}
	}
	return w.changes.Load(), true
}

// healthyReaders answers the webhook's ConfigMap and account reviews from the reader watches only
// while every one of them in the namespace asked about has synced and works: a broken watch
// (its RBAC taken, the API server unreachable) may be missing the very workload that reads the
// ConfigMap, and "read by no one" would admit a change that disarms it (the third red team took
// the webhook's pods and ReplicationController reads, and a ConfigMap edit turning an armed bare
// Pod's election off was admitted with no reader). Such a review is "could not verify" instead.
type healthyReaders struct{ w *watches }

var (
	_ webhook.ConfigMapReaders = healthyReaders{}
	_ webhook.AccountUsers     = healthyReaders{}
)

// check reports the first reader watch of namespace ("": all of them) that cannot be trusted.
func (h healthyReaders) check(namespace string) error {
	for _, scopes := range h.w.byKind {
		for ns, x := range scopes {
			if namespace != "" && ns != "" && ns != namespace {
				continue
			}
			if err := x.trusted(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h healthyReaders) ReadersOf(namespace, configMap string) ([]*webhook.Workload, error) {
	if err := h.check(namespace); err != nil {
		return nil, fmt.Errorf("the webhook cannot tell which workloads read it: %w", err)
	}
	return h.w.readers.ReadersOf(namespace, configMap)
}

// HoldersOf is ReadersOf's, for the Pods that hold a ConfigMap.
func (h healthyReaders) HoldersOf(namespace, configMap string) ([]*webhook.Workload, error) {
	if err := h.check(namespace); err != nil {
		return nil, fmt.Errorf("the webhook cannot tell which Pods reference it: %w", err)
	}
	return h.w.readers.HoldersOf(namespace, configMap)
}

func (h healthyReaders) UsersOf(sel webhook.AccountSelector) ([]*webhook.Workload, error) {
	if err := h.check(sel.Namespace); err != nil {
		return nil, fmt.Errorf("the webhook cannot tell which workloads run as them: %w", err)
	}
	return h.w.readers.UsersOf(sel)
}

// Covers is ScopedReaders' (the RBAC review asks it first).
func (h healthyReaders) Covers(namespace string) bool { return h.w.readers.Covers(namespace) }
