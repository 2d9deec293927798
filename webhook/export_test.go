package webhook

import "io"

// FilterConfigMaps is what the guard keeps of cms when it reads them for a review of ws.
func FilterConfigMaps(cms map[string]map[string]string, ws ...*Workload) map[string]map[string]string {
	needs := configMapNeeds(ws...)
	l := &reviewLoad{needs: needs}
	out := map[string]map[string]string{}
	for name, data := range cms {
		f := l.filter(name)
		kept := map[string]string{}
		for k, v := range data {
			if f.keep(k) {
				kept[k] = v
			}
		}
		out[name] = kept
	}
	return out
}

// SkimConfigMap is skimConfigMap.
func SkimConfigMap(r io.Reader, keep func(string) bool, maxKept int) (map[string]string, int64, error) {
	return skimConfigMap(r, keep, maxKept)
}

// GuardReadNames are the variables the guard reads besides those with GuardReadPrefix.
var GuardReadNames, GuardReadPrefix = guardReadNames, guardReadPrefix
