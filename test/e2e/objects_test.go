package e2e

import (
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook/webhooktest"
)

// referenceWriter is the production writer's StatefulSet (webhooktest.ReferenceWriter, SPEC.md
// "Reference deployment") with the given ServiceAccount ("" leaves it unset, as it is today),
// replicas and literal environment variables.
func referenceWriter(ns, sa string, replicas int32, env map[string]string) *appsv1.StatefulSet {
	opts := []func(*appsv1.StatefulSet){webhooktest.ServiceAccount(sa), webhooktest.Replicas(replicas)}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		opts = append(opts, webhooktest.SetEnv(k, env[k]))
	}
	return webhooktest.ReferenceWriter(ns, opts...)
}

// unrelatedDeployment mentions no fencing variable: the webhook's matchConditions keep it out.
func unrelatedDeployment(ns string) *appsv1.Deployment {
	labels := map[string]string{"app": "unrelated"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "example.invalid/app", Env: []corev1.EnvVar{{Name: "MODE", Value: "enforce"}},
				}}},
			},
		},
	}
}
