{{/* The release's full name: "dbkeeper" for a release named so, else "<release>-dbkeeper". */}}
{{- define "dbkeeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Cluster-scoped names carry the release namespace too, so that two installs in different namespaces coexist. */}}
{{- define "dbkeeper.clusterName" -}}
{{- printf "%s-%s" (include "dbkeeper.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dbkeeper.serviceAccountName" -}}
{{- default (include "dbkeeper.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "dbkeeper.selectorLabels" -}}
app.kubernetes.io/name: dbkeeper
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "dbkeeper.labels" -}}
{{ include "dbkeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The manager's image: repository@digest, or repository:tag (default appVersion). */}}
{{- define "dbkeeper.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* --agent-image: values agentImage, else the manager's own image (the engine pods run its /manager copy-self). */}}
{{- define "dbkeeper.agentImage" -}}
{{- default (include "dbkeeper.image" .) .Values.agentImage -}}
{{- end -}}

{{/* --controllers: "*" when all are on, else "*,-a,-b". The order is the manager's registry order. */}}
{{- define "dbkeeper.controllers" -}}
{{- $off := list -}}
{{- range $name := list "statefulset" "service" "secret" "backup" "tls" "replication" "configuration" "roles" "extensions" "cleanup" "readiness" -}}
{{- if not (dig $name "enabled" true $.Values.controllers) -}}
{{- $off = append $off (printf "-%s" $name) -}}
{{- end -}}
{{- end -}}
{{- prepend $off "*" | join "," -}}
{{- end -}}

{{/* --engine-images: "<engine>:<version>=<image>,...", sorted by engine and version. */}}
{{- define "dbkeeper.engineImages" -}}
{{- $entries := list -}}
{{- range $key, $image := .Values.engineImages.overrides -}}
{{- $entries = append $entries (printf "%s=%s" $key $image) -}}
{{- end -}}
{{- join "," $entries -}}
{{- end -}}

{{- define "dbkeeper.leaderElection" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicas) 1) -}}true{{- end -}}
{{- end -}}

{{/* The rules of the manager, read from the ClusterRole controller-gen generates (files/role.yaml, a copy of config/rbac/role.yaml). */}}
{{- define "dbkeeper.rules" -}}
{{- range $doc := splitList "---" (.Files.Get "files/role.yaml") -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj (eq (get $obj "kind") "ClusterRole") -}}
{{- toYaml (get $obj "rules") -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The leader-election rules: the Role controller-gen generates for the manager's namespace. */}}
{{- define "dbkeeper.leaderRules" -}}
{{- range $doc := splitList "---" (.Files.Get "files/role.yaml") -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj (eq (get $obj "kind") "Role") -}}
{{- toYaml (get $obj "rules") -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The port of /metrics: metrics.port, else 8443 when secure and 8080 when not. */}}
{{- define "dbkeeper.metricsPort" -}}
{{- if .Values.metrics.port -}}
{{- .Values.metrics.port -}}
{{- else if .Values.metrics.secure -}}
8443
{{- else -}}
8080
{{- end -}}
{{- end -}}

{{/* The name of the metrics port, of the container and of the Service: https when secure. */}}
{{- define "dbkeeper.metricsPortName" -}}
{{- if .Values.metrics.secure -}}https{{- else -}}metrics{{- end -}}
{{- end -}}
