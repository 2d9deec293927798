package webhook

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// This file answers: which environment names does the node that runs a pod treat as one, and
// what does the process see of a value?
//
// Linux matches environment names exactly. Windows matches them regardless of case: Go's
// os.LookupEnv there asks GetEnvironmentVariableW, so a Windows writer with
// noetl_ehdb_fencing=enforce runs armed (the fifteenth red team's Pod, with spec.os.name: windows,
// was admitted without a webhook call). The kubelet builds the list by exact name on both
// (makeEnvironmentVariables keeps a map), so a container may carry NOETL_EHDB_FENCING and
// noetl_ehdb_fencing at once, and which one a Windows process reads is not the kubelet's to say.
// The guard therefore folds names unless the pod is certain to run on Linux, and a name whose
// variants disagree, or that an unreadable source may set in any case, cannot be known.
//
// A pod is certain to run on Linux when the kubelet refuses it anywhere else: spec.os.name is
// linux (rejectPodAdmissionBasedOnOSField), or its nodeSelector says kubernetes.io/os: linux (the
// node-affinity check compares it with the node's label, which the kubelet resets to its GOOS at
// each status update, so only someone who may edit Nodes can misdirect it, and for seconds). Both
// are fixed once the pod is bound. A kubernetes.io/os label is not enough: the kubelet compares
// it with its GOOS only when it admits the pod (rejectPodAdmissionBasedOnOSSelector), and a
// label can be added to a running pod, whose next container start on Windows then reads
// noetl_ehdb_fencing as the switch (team F armed one so, with one `kubectl label`). Names are printable ASCII (the API server's IsRelaxedEnvVarName; ConfigMap
// keys are narrower still), so ASCII case folding is the whole of Windows' rule for them.
//
// A value is a C string to the process: execve and the Windows environment block both end it at
// its first NUL byte. runc refuses such a value (the container does not start), a runtime in C
// cuts it there, so the process sees at most the text before the NUL, and the guard judges that
// (enforce\x00 arms; the alternative, no container at all, arms nothing).

// envNames is how a pod's node matches environment names.
type envNames struct{ fold bool }

// envNamesOf is the rule for pod: exact on a pod certain to run on Linux, folded otherwise.
func envNamesOf(pod *PodContext) envNames {
	return envNames{fold: !certainlyLinux(pod)}
}

// certainlyLinux reports whether every kubelet but a Linux one refuses pod.
func certainlyLinux(pod *PodContext) bool {
	if pod == nil || pod.Spec == nil {
		return false
	}
	if os := pod.Spec.OS; os != nil {
		return os.Name == corev1.Linux
	}
	return pod.Spec.NodeSelector[corev1.LabelOSStable] == string(corev1.Linux)
}

// key is the name as the node compares it.
func (n envNames) key(name string) string {
	if !n.fold {
		return name
	}
	return foldName(name)
}

// foldName upper-cases the ASCII letters of name (names are ASCII; see above).
func foldName(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'a' <= c && c <= 'z' {
			return strings.ToUpper(name)
		}
	}
	return name
}

// mayBeName reports whether a container's entry named entry may set the variable name on some
// node: the same name up to case. Used where the guard decides what to look at (which containers,
// which ConfigMap keys), where looking at more is only slower.
func mayBeName(entry, name string) bool { return strings.EqualFold(entry, name) }

// mayHavePrefix reports whether name may fall under an envFrom prefix on some node: the prefix
// begins it, up to case.
func mayHavePrefix(name, prefix string) bool {
	return len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix)
}

// asSeen is the text a process sees of a value: up to its first NUL byte.
func asSeen(text string) string {
	if i := strings.IndexByte(text, 0); i >= 0 {
		return text[:i]
	}
	return text
}
