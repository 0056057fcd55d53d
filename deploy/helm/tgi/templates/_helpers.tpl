{{/* Names and labels shared by the templates. */}}
{{- define "tgi.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tgi.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tgi.labels" -}}
{{ include "tgi.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
tgi/hardware: {{ .Values.hardware }}
{{- end -}}

{{- define "tgi.image" -}}
{{- $known := list "cpu" "cuda" "rocm" "gaudi" "neuron" "tpu" "xpu" -}}
{{- if not (has .Values.hardware $known) -}}
{{- fail (printf "hardware must be one of %s, got %q" (join ", " $known) .Values.hardware) -}}
{{- end -}}
{{- printf "%s:%s-%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) .Values.hardware -}}
{{- end -}}
