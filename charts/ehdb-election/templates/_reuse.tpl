{{- /*
`helm upgrade --reuse-values` renders this chart with the PREVIOUS chart's values in place of this
chart's values.yaml (Helm replaces the chart's defaults by the old release's coalesced values), so a
key added since the previous release is simply absent: a template reading it fails, or silently gets
a Go zero (no aggregated role, no runbook URLs, Kubernetes' default revisionHistoryLimit). Every
template that reads an added key includes "ehdb-election.reuse" first: it fills each added key that
is absent — never one that is set, whatever its value — with this version's default. The list is
every key values.yaml has that the previous release's did not (charttest
TestReuseValuesFromThePreviousReleaseRendersTheDefaults renders both ways and compares, so a key
added without an entry here, or a default that differs from values.yaml, fails the chart tests).
*/}}
{{- define "ehdb-election.addedKeys" -}}
global:
  imageRegistry: ""
writer:
  rbac:
    aggregateToView: true
webhook:
  failurePolicy:
    clusterRBAC: Ignore
  hostNetwork: false
  dnsPolicy: ""
  revisionHistoryLimit: 5
  extraEnv: []
  extraVolumes: []
  extraVolumeMounts: []
metrics:
  prometheusRule:
    runbookBaseURL: https://github.com/noetl/ehdb-election/blob/main/docs/runbooks
{{- end }}

{{- define "ehdb-election.reuse" -}}
{{- include "ehdb-election.fillAbsent" (list .Values (include "ehdb-election.addedKeys" . | fromYaml)) -}}
{{- end }}

{{- /* fillAbsent sets, in the map (index . 0), every key of the map (index . 1) it lacks, recursing
into maps both hold. A key present with any value (false, "", 0, [], null) is left as it is. */}}
{{- define "ehdb-election.fillAbsent" -}}
{{- $dst := index . 0 }}
{{- range $k, $v := index . 1 }}
{{- if not (hasKey $dst $k) }}
{{- $_ := set $dst $k $v }}
{{- else if and (kindIs "map" $v) (kindIs "map" (index $dst $k)) }}
{{- include "ehdb-election.fillAbsent" (list (index $dst $k) $v) }}
{{- end }}
{{- end }}
{{- end }}
