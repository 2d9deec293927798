package webhook

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// ConfigMapReaders tells which guarded workloads read a ConfigMap into their environment. The
// guard asks it when a ConfigMap is created or updated with a value that may arm a reader, so
// that arming by editing a ConfigMap gets the same checks as arming by editing the workload.
// Implementations answer from a watch-fed cache: never a list per review.
type ConfigMapReaders interface {
	ReadersOf(namespace, configMap string) ([]*Workload, error)
}

// Owners finds the controller an object names, as the webhook's watches hold it. The guard asks
// before exempting a ReplicaSet or Job from the order check because its controller is a
// Deployment or CronJob: the exemption holds only for the owner's own pod template (owners.go).
type Owners interface {
	// Owner returns the controller ref names in namespace. found is false when no such object
	// exists with ref's UID; known is false when the webhook cannot tell (kind not watched, the
	// lookup failed).
	Owner(namespace string, ref metav1.OwnerReference) (owner *Workload, found, known bool)
}

// ConfigMapIndex is the name of the informer index IndexByConfigMap computes.
const ConfigMapIndex = "ehdb-election/configmaps"

// IndexByConfigMap is a cache.IndexFunc over judged workloads: "<namespace>/<name>" of every
// ConfigMap their pod template's containers read with envFrom or configMapKeyRef, and, for a Pod,
// "<namespace>/<name>" + holdsKey of every ConfigMap it references at all (volumes, projected
// sources, env): a kubelet keeps an immutable ConfigMap for as long as a Pod on its node does.
func IndexByConfigMap(obj any) ([]string, error) {
	o, ok := obj.(runtime.Object)
	if !ok {
		return nil, nil
	}
	w, err := WorkloadOf(o, "")
	if err != nil {
		return nil, nil // not a judged kind: not indexed
	}
	var keys []string
	for _, c := range w.Containers() {
		for _, name := range referencedConfigMaps(c) {
			keys = appendNew(keys, w.Namespace+"/"+name)
		}
	}
	if w.Kind == gvkPod.Kind && w.Pod.Spec != nil {
		for _, name := range podConfigMaps(w) {
			keys = appendNew(keys, w.Namespace+"/"+name+holdsKey)
		}
	}
	return keys, nil
}

// holdsKey marks the index entries of the ConfigMaps a Pod references by any means (HoldersOf).
const holdsKey = "\x00holds"

// podConfigMaps lists every ConfigMap a Pod references, as the kubelet's ConfigMap manager counts
// its references (VisitPodConfigmapNames: env, envFrom, configMap volumes and projected sources).
func podConfigMaps(w *Workload) []string {
	var out []string
	for _, c := range w.Containers() {
		for _, name := range referencedConfigMaps(c) {
			out = appendNew(out, name)
		}
	}
	for _, v := range w.Pod.Spec.Volumes {
		if v.ConfigMap != nil {
			out = appendNew(out, v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					out = appendNew(out, s.ConfigMap.Name)
				}
			}
		}
	}
	return out
}

// ConfigMapHolders finds the Pods that reference a ConfigMap by any means (HoldersOf).
type ConfigMapHolders interface {
	HoldersOf(namespace, configMap string) ([]*Workload, error)
}

// HoldersOf implements ConfigMapHolders: the Pods bound to a node that reference configMap.
func (r IndexReaders) HoldersOf(namespace, configMap string) ([]*Workload, error) {
	out, err := r.indexed(namespace, namespace+"/"+configMap+holdsKey)
	return slices.DeleteFunc(out, func(w *Workload) bool { return w.Pod.Spec.NodeName == "" }), err
}

// indexed is every object of the judged kinds under key in ConfigMapIndex.
func (r IndexReaders) indexed(namespace, key string) ([]*Workload, error) {
	var out []*Workload
	for _, idx := range r {
		objs, err := idx.ByIndex(ConfigMapIndex, key)
		if err != nil {
			return nil, fmt.Errorf("reading the %s index: %w", ConfigMapIndex, err)
		}
		for _, o := range objs {
			if ro, ok := o.(runtime.Object); ok {
				if w, err := WorkloadOf(ro, namespace); err == nil {
					out = append(out, w)
				}
			}
		}
	}
	return out, nil
}

// HoldersOf implements ConfigMapHolders within the watches' namespaces.
func (s ScopedReaders) HoldersOf(namespace, configMap string) ([]*Workload, error) {
	h, ok := s.Readers.(ConfigMapHolders)
	if !ok {
		return nil, errors.New("the readers' cache does not index the Pods that hold a ConfigMap")
	}
	if !s.Covers(namespace) {
		return nil, fmt.Errorf("this webhook's watches cover %v, not namespace %s", s.Namespaces, namespace)
	}
	return h.HoldersOf(namespace, configMap)
}

// IndexReaders answers ReadersOf from informer indexers that carry IndexByConfigMap (one per
// kind and namespace watched).
type IndexReaders []cache.Indexer

// ReadersOf implements ConfigMapReaders: the readers sorted by kind and name.
func (r IndexReaders) ReadersOf(namespace, configMap string) ([]*Workload, error) {
	out, err := r.indexed(namespace, namespace+"/"+configMap)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// ScopedReaders answers ReadersOf only in the namespaces its watches cover (Namespaces; "" is
// every namespace). A ConfigMap elsewhere is an error, so the review fails closed ("could not
// tell which workloads read it") instead of finding it read by no one (issue 17, class 8: a process
// whose watches cover fewer namespaces than its webhook configuration sends it).
type ScopedReaders struct {
	Readers    ConfigMapReaders
	Namespaces []string
}

// ReadersOf implements ConfigMapReaders.
func (s ScopedReaders) ReadersOf(namespace, configMap string) ([]*Workload, error) {
	if !slices.Contains(s.Namespaces, "") && !slices.Contains(s.Namespaces, namespace) {
		return nil, fmt.Errorf("this webhook's watches cover %v, not namespace %s: its configuration sends it more than its --guarded-namespaces", s.Namespaces, namespace)
	}
	return s.Readers.ReadersOf(namespace, configMap)
}

// ServiceAccountIndex is the name of the informer index IndexByServiceAccount computes.
const ServiceAccountIndex = "ehdb-election/serviceaccounts"

// IndexByServiceAccount is a cache.IndexFunc over judged workloads: "<namespace>/<account>" of
// the ServiceAccount their pods run as ("default" when the template names none).
func IndexByServiceAccount(obj any) ([]string, error) {
	o, ok := obj.(runtime.Object)
	if !ok {
		return nil, nil
	}
	w, err := WorkloadOf(o, "")
	if err != nil || w.Pod.Spec == nil {
		return nil, nil
	}
	return []string{w.Namespace + "/" + ServiceAccountName(w.Pod.Spec)}, nil
}

// AccountUsers finds the guarded objects whose pods run as the ServiceAccounts a selector selects,
// for an RBAC or ServiceAccount change (rbacreview.go). Implementations answer from a watch-fed
// cache.
type AccountUsers interface {
	UsersOf(sel AccountSelector) ([]*Workload, error)
}

// UsersOf implements AccountUsers: by the ServiceAccountIndex for one account, by a scan of the
// cache for a group subject (every account of a namespace, or of every namespace).
func (r IndexReaders) UsersOf(sel AccountSelector) ([]*Workload, error) {
	var out []*Workload
	for _, idx := range r {
		var objs []any
		if sel.Namespace != "" && sel.Name != "" {
			var err error
			if objs, err = idx.ByIndex(ServiceAccountIndex, sel.Namespace+"/"+sel.Name); err != nil {
				return nil, fmt.Errorf("reading the %s index: %w", ServiceAccountIndex, err)
			}
		} else {
			objs = idx.List()
		}
		for _, o := range objs {
			ro, ok := o.(runtime.Object)
			if !ok {
				continue
			}
			w, err := WorkloadOf(ro, "")
			if err != nil || (sel.Namespace != "" && w.Namespace != sel.Namespace) {
				continue
			}
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// Covers reports whether the watches cover namespace.
func (s ScopedReaders) Covers(namespace string) bool {
	return slices.Contains(s.Namespaces, "") || slices.Contains(s.Namespaces, namespace)
}

// UsersOf implements AccountUsers within the watched namespaces: accounts of a namespace the
// watches do not cover run no object the guard knows (out of its reach, README).
func (s ScopedReaders) UsersOf(sel AccountSelector) ([]*Workload, error) {
	users, ok := s.Readers.(AccountUsers)
	if !ok {
		return nil, errors.New("the readers' cache has no ServiceAccount index")
	}
	if sel.Namespace != "" && !s.Covers(sel.Namespace) {
		return nil, nil
	}
	return users.UsersOf(sel)
}
