package webhook

import (
	"strconv"
)

// statefulSetHostname is $HOSTNAME in the pod of the given ordinal: the pod's name
// (<set>-<ordinal>, which the StatefulSet controller also sets as spec.hostname), the
// spec.hostnameOverride when the template sets one, or the FQDN when setHostnameAsFQDN is true.
func statefulSetHostname(w *Workload, ordinal int64) string {
	s := w.Pod.Spec
	if s != nil && s.HostnameOverride != nil && *s.HostnameOverride != "" {
		return *s.HostnameOverride
	}
	host := w.Name + "-" + strconv.FormatInt(ordinal, 10)
	if s != nil && s.SetHostnameAsFQDN != nil && *s.SetHostnameAsFQDN {
		// The cluster domain is the node's; any domain ends in a label, never in "-<digits>".
		host += "." + w.ServiceName + "." + w.Namespace + ".svc.cluster.local"
	}
	return host
}
