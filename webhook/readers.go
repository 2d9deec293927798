package webhook

import (
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
// ConfigMap their pod template's containers read with envFrom or configMapKeyRef.
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
	return keys, nil
}

// IndexReaders answers ReadersOf from informer indexers that carry IndexByConfigMap (one per
// kind and namespace watched).
type IndexReaders []cache.Indexer

// ReadersOf implements ConfigMapReaders: the readers sorted by kind and name.
func (r IndexReaders) ReadersOf(namespace, configMap string) ([]*Workload, error) {
	var out []*Workload
	for _, idx := range r {
		objs, err := idx.ByIndex(ConfigMapIndex, namespace+"/"+configMap)
		if err != nil {
			return nil, fmt.Errorf("reading the %s index: %w", ConfigMapIndex, err)
		}
		for _, o := range objs {
			ro, ok := o.(runtime.Object)
			if !ok {
				continue
			}
			w, err := WorkloadOf(ro, namespace)
			if err != nil {
				continue
			}
			out = append(out, w)
		}
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
