package charttest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// TestRedTeamFinalRound replays, on the real API server with the controllers running, the breaks
// the fresh red team found in the finished guard (issue 17's last round); each was admitted there.
func TestRedTeamFinalRound(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	sets, pods := cs.AppsV1().StatefulSets(rt.ns), cs.CoreV1().Pods(rt.ns)
	rt.liveLease(t, 0)

	// The armed writer, admitted with shard 0 live; the StatefulSet controller makes its Pod.
	var set *appsv1.StatefulSet
	waitFor(t, 30*time.Second, "the armed writer admitted with shard 0 live", func(ctx context.Context) (bool, error) {
		var err error
		set, err = sets.Create(ctx, rt.writer("w"), metav1.CreateOptions{})
		return err == nil, nil
	})

	t.Run("a Pod naming the real, armed StatefulSet on an ordinal it does not have", func(t *testing.T) {
		var seen *corev1.Pod
		waitFor(t, 60*time.Second, "the controller's Pod w-0", func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, "w-0", metav1.GetOptions{})
			seen = p
			return err == nil, nil
		})
		rogue := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-9", Labels: seen.Labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: set.Name, UID: set.UID, Controller: ptr.To(true)}}},
			Spec: *seen.Spec.DeepCopy()}
		rogue.Spec.Hostname = "w-9"
		rogue.Spec.NodeName = ""
		_, err := pods.Create(ctx, rogue, dryRunCreate)
		refused(t, "Pod w-9 of the real StatefulSet w (replicas 1)", err, "ehdb-shard-00000009 (shard 9) does not exist")
	})

	t.Run("an annotation edit that arms a bare Pod", func(t *testing.T) {
		tpl := rt.writer("annotated").Spec.Template
		c := &tpl.Spec.Containers[0]
		for i := range c.Env {
			if c.Env[i].Name == "NOETL_EHDB_FENCING" {
				c.Env[i] = corev1.EnvVar{Name: "NOETL_EHDB_FENCING", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['noetl.io/fencing']"}}}
			}
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "annotated-9", Annotations: map[string]string{"noetl.io/fencing": "shadow"}}, Spec: tpl.Spec}
		p, err := pods.Create(ctx, p, metav1.CreateOptions{})
		admitted(t, "a bare Pod whose fencing annotation says shadow", err)
		if err != nil {
			return
		}
		p.Annotations["noetl.io/fencing"] = "enforce"
		_, err = pods.Update(ctx, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, "the annotation set to enforce", err, "ehdb-shard-00000009 (shard 9) does not exist")
		// The status subresource writes annotations too (the third red team).
		_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, "the annotation set to enforce through pods/status", err, "ehdb-shard-00000009 (shard 9) does not exist")
	})

	t.Run("a Service named kubernetes in a guarded namespace", func(t *testing.T) {
		// The kubelet (getServiceEnvVarMap) gives its address to every container of the namespace
		// that keeps its service links as KUBERNETES_SERVICE_HOST, in place of the API server's.
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}
		_, err := cs.CoreV1().Services(rt.ns).Create(ctx, svc, dryRunCreate)
		if err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
			t.Errorf("a Service named kubernetes in %s: %v; want the guard to refuse it", rt.ns, err)
		}
		svc.Name = "writer-metrics"
		_, err = cs.CoreV1().Services(rt.ns).Create(ctx, svc, dryRunCreate)
		admitted(t, "another Service", err)
		// The twelfth red team: kubernetes-service's NAME_PORT link is KUBERNETES_SERVICE_PORT,
		// "tcp://<ip>:443", and client-go builds no configuration from it. Refused in every type,
		// as an ExternalName one becomes a ClusterIP one by an update.
		for _, typ := range []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName} {
			linked := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-service"}, Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 443}}}}
			if typ == corev1.ServiceTypeExternalName {
				linked.Spec.ExternalName = "api.example.invalid"
			}
			_, err = cs.CoreV1().Services(rt.ns).Create(ctx, linked, dryRunCreate)
			if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_PORT among them") {
				t.Errorf("a Service named kubernetes-service, %s, in %s: %v; want the guard to refuse it", typ, rt.ns, err)
			}
		}
	})

	t.Run("the armed StatefulSet moved onto the host network", func(t *testing.T) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Spec.Template.Spec.HostNetwork = true
			_, err = sets.Update(ctx, got, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})
		refused(t, "armed → armed on the host network", err, "host network")
	})

	t.Run("the webhook's own bindings deleted", func(t *testing.T) {
		sa := types.NamespacedName{Namespace: rt.ns}
		accounts, err := cs.CoreV1().ServiceAccounts(rt.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rt.name})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range accounts.Items {
			if strings.HasSuffix(a.Name, "-webhook") {
				sa.Name = a.Name
			}
		}
		binds := func(subjects []rbacv1.Subject, ns string) bool {
			return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
				return s.Kind == "ServiceAccount" && s.Name == sa.Name && (s.Namespace == sa.Namespace || (s.Namespace == "" && ns == sa.Namespace))
			})
		}
		dryDelete := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		n := 0
		crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range crbs.Items {
			if binds(b.Subjects, "") {
				n++
				err := cs.RbacV1().ClusterRoleBindings().Delete(ctx, b.Name, dryDelete)
				if err == nil || !strings.Contains(err.Error(), "the webhook's own ServiceAccount") {
					t.Errorf("deleting ClusterRoleBinding %s of the webhook's %s: %v; want the guard to refuse it", b.Name, sa, err)
				}
				// The second red team: its ClusterRole grants no lease verb, and an edit that
				// took SubjectAccessReviews from it was sent to no webhook.
				role, err := cs.RbacV1().ClusterRoles().Get(ctx, b.RoleRef.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "subjectaccessreviews") })
				_, err = cs.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
				if err == nil || !strings.Contains(err.Error(), "the webhook's own ServiceAccount") {
					t.Errorf("taking SubjectAccessReviews from the webhook's ClusterRole %s: %v; want the guard to refuse it", role.Name, err)
				}
			}
		}
		rbs, err := cs.RbacV1().RoleBindings(rt.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range rbs.Items {
			if binds(b.Subjects, b.Namespace) {
				n++
				err := cs.RbacV1().RoleBindings(rt.ns).Delete(ctx, b.Name, dryDelete)
				if err == nil || !strings.Contains(err.Error(), "the webhook's own ServiceAccount") {
					t.Errorf("deleting RoleBinding %s of the webhook's %s: %v; want the guard to refuse it", b.Name, sa, err)
				}
			}
		}
		if n == 0 {
			t.Fatalf("no binding of the webhook's ServiceAccount %s found", sa)
		}
		err = cs.CoreV1().ServiceAccounts(rt.ns).Delete(ctx, sa.Name, dryDelete)
		if err == nil || !strings.Contains(err.Error(), "the webhook's own ServiceAccount") {
			t.Errorf("deleting the webhook's ServiceAccount %s: %v; want the guard to refuse it", sa, err)
		}
	})
}
