package e2e

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// referenceWriter is a StatefulSet shaped like the production writer (SPEC.md, "Reference
// deployment"): one container noetl-worker, Parallel, grace 60 s, metrics on 9090, the shard
// from the ordinal in HOSTNAME. sa "" leaves serviceAccountName unset, as it is today.
func referenceWriter(ns, sa string, replicas int32, env map[string]string) *appsv1.StatefulSet {
	labels := map[string]string{
		"app": "noetl-cmdbus-writer", "component": "cmdbus-writer", "command-bus": "ehdb", "managed-by": "noetl",
	}
	var vars []corev1.EnvVar
	for _, k := range []string{"NOETL_EHDB_FENCING", "NOETL_EHDB_ELECTION", "NOETL_EHDB_ELECTION_LEASE_SECS", "NOETL_EHDB_ELECTION_RENEW_SECS"} {
		if v, ok := env[k]; ok {
			vars = append(vars, corev1.EnvVar{Name: k, Value: v})
		}
	}
	vars = append(vars, corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "noetl-cmdbus-writer", Namespace: ns, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         "noetl-cmdbus-writer-headless",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": "noetl-cmdbus-writer"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            sa,
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					Containers: []corev1.Container{{
						Name:  "noetl-worker",
						Image: "ghcr.io/noetl/ehdb-election-writer:dev",
						Env:   vars,
						Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(9090)},
						}},
					}},
				},
			},
		},
	}
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

func corev1EnvVar(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }
