package charttest

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestWebhookKnobs (issue 18): the knobs other webhook charts have reach the Deployment, and
// global.imageRegistry is implemented, not silently ignored.
func TestWebhookKnobs(t *testing.T) {
	deployment := func(values map[string]any) *appsv1.Deployment {
		t.Helper()
		return typed[appsv1.Deployment](t, mustRender(t, values).Find("Deployment", "ehdb-election-webhook"))
	}
	wh := func(v map[string]any) map[string]any { return map[string]any{"webhook": v} }

	d := deployment(nil)
	if p := d.Spec.Template.Spec; p.HostNetwork || p.DNSPolicy != "" || p.PriorityClassName != "system-cluster-critical" || ptr.Deref(d.Spec.RevisionHistoryLimit, -1) != 5 {
		t.Errorf("defaults: hostNetwork %v dnsPolicy %q priorityClassName %q revisionHistoryLimit %v", p.HostNetwork, p.DNSPolicy, p.PriorityClassName, d.Spec.RevisionHistoryLimit)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/noetl/ehdb-election-webhook:0.1.0" && !strings.HasPrefix(img, "ghcr.io/noetl/ehdb-election-webhook:") {
		t.Errorf("default image %s", img)
	}

	d = deployment(wh(map[string]any{"hostNetwork": true, "revisionHistoryLimit": 2, "priorityClassName": ""}))
	if p := d.Spec.Template.Spec; !p.HostNetwork || p.DNSPolicy != corev1.DNSClusterFirstWithHostNet || p.PriorityClassName != "" || *d.Spec.RevisionHistoryLimit != 2 {
		t.Errorf("hostNetwork: hostNetwork %v dnsPolicy %q priorityClassName %q revisionHistoryLimit %d", p.HostNetwork, p.DNSPolicy, p.PriorityClassName, *d.Spec.RevisionHistoryLimit)
	}
	if p := deployment(wh(map[string]any{"hostNetwork": true, "dnsPolicy": "Default"})).Spec.Template.Spec; p.DNSPolicy != corev1.DNSDefault {
		t.Errorf("dnsPolicy override: %q", p.DNSPolicy)
	}

	env := []any{map[string]any{"name": "GODEBUG", "value": "x509negativeserial=1"},
		map[string]any{"name": "NODE", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "spec.nodeName"}}}}
	vols := []any{map[string]any{"name": "tmp", "emptyDir": map[string]any{"medium": "Memory"}}}
	mounts := []any{map[string]any{"name": "tmp", "mountPath": "/tmp"}}
	d = deployment(wh(map[string]any{"extraEnv": env, "extraVolumes": vols, "extraVolumeMounts": mounts}))
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Env) != 4 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[1].Name != "POD_SERVICE_ACCOUNT" || c.Env[2].Name != "GODEBUG" || c.Env[3].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("extraEnv: %+v", c.Env)
	}
	if v := d.Spec.Template.Spec.Volumes; len(v) != 2 || v[0].Name != "certs" || v[1].EmptyDir == nil || v[1].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("extraVolumes: %+v", v)
	}
	if len(c.VolumeMounts) != 2 || !reflect.DeepEqual(c.VolumeMounts[1], corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"}) {
		t.Errorf("extraVolumeMounts: %+v", c.VolumeMounts)
	}
	for _, bad := range []map[string]any{
		wh(map[string]any{"extraEnv": []any{map[string]any{"nme": "X"}}}),
		wh(map[string]any{"extraVolumes": []any{map[string]any{"name": "tmp", "emptyDir": map[string]any{"medum": "Memory"}}}}),
		wh(map[string]any{"dnsPolicy": "ClusterFirstWithHost"}),
		wh(map[string]any{"revisionHistoryLimit": -1}),
	} {
		if _, err := Render(Name, testNS, bad); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%v: err = %v, want a schema refusal", bad, err)
		}
	}

	// global.imageRegistry replaces the registry; a repository without one is prefixed.
	for _, tc := range []struct {
		registry, repository, want string
	}{
		{"registry.example.com/mirror", "ghcr.io/noetl/ehdb-election-webhook", "registry.example.com/mirror/noetl/ehdb-election-webhook:1.2.3"},
		{"mirror.local:5000", "localhost/ehdb/webhook", "mirror.local:5000/ehdb/webhook:1.2.3"},
		{"mirror.local:5000/", "noetl/ehdb-election-webhook", "mirror.local:5000/noetl/ehdb-election-webhook:1.2.3"},
		{"", "ghcr.io/noetl/ehdb-election-webhook", "ghcr.io/noetl/ehdb-election-webhook:1.2.3"},
	} {
		v := map[string]any{"global": map[string]any{"imageRegistry": tc.registry}, "webhook": map[string]any{"image": map[string]any{"repository": tc.repository, "tag": "1.2.3"}}}
		if got := deployment(v).Spec.Template.Spec.Containers[0].Image; got != tc.want {
			t.Errorf("imageRegistry %q, repository %q: image %s, want %s", tc.registry, tc.repository, got, tc.want)
		}
	}
}

// TestDefaultPriorityClassIsAdmittedOutsideKubeSystem: kube-apiserver (its Priority admission
// plugin) admits the default install's webhook Pods, system-cluster-critical, in the release
// namespace: the controllers create them with the class's priority.
func TestDefaultPriorityClassIsAdmittedOutsideKubeSystem(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	r.install(t, r.values(nil))
	waitFor(t, 90*time.Second, "the webhook's Pods to be created", func(ctx context.Context) (bool, error) {
		pods, err := r.cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.PriorityClassName != "system-cluster-critical" || ptr.Deref(p.Spec.Priority, 0) != 2000000000 {
				t.Fatalf("pod %s: priorityClassName %q priority %v", p.Name, p.Spec.PriorityClassName, p.Spec.Priority)
			}
		}
		return len(pods.Items) > 0, nil
	})
}
