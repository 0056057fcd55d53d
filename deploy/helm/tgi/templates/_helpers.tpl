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

{{- /* The pod spec of a server (the Deployment's, a LeaderWorkerSet's leader) or of a headless node (the
LeaderWorkerSet's workers): (dict "root" $ "headless" bool "multiNode" bool). */ -}}
{{- define "tgi.podSpec" -}}
terminationGracePeriodSeconds: {{ $.root.Values.terminationGracePeriodSeconds }}
automountServiceAccountToken: {{ $.root.Values.automountServiceAccountToken }}
securityContext:
  {{- toYaml $.root.Values.podSecurityContext | nindent 2 }}
{{- with $.root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: tgi
    image: {{ include "tgi.image" $.root | quote }}
    imagePullPolicy: {{ $.root.Values.image.pullPolicy }}
    securityContext:
      {{- toYaml $.root.Values.securityContext | nindent 6 }}
    {{- with $.root.Values.extraArgs }}
    args:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    env:
      - name: PORT
        value: {{ $.root.Values.port | quote }}
      - name: HF_HOME
        value: /data
      - name: HOME
        value: /tmp
      {{- if $.root.Values.securityContext.readOnlyRootFilesystem }}
      - name: TGI_CACHE_DIR
        value: /tmp/tgi-cache
      {{- end }}
      {{- with $.root.Values.model.id }}
      - name: MODEL_ID
        value: {{ . | quote }}
      {{- end }}
      {{- with $.root.Values.model.revision }}
      - name: REVISION
        value: {{ . | quote }}
      {{- end }}
      {{- if $.root.Values.apiKey.existingSecret }}
      - name: API_KEY
        valueFrom:
          secretKeyRef:
            name: {{ $.root.Values.apiKey.existingSecret }}
            key: {{ $.root.Values.apiKey.key }}
      {{- end }}
      {{- if $.root.Values.hfToken.existingSecret }}
      - name: HF_TOKEN
        valueFrom:
          secretKeyRef:
            name: {{ $.root.Values.hfToken.existingSecret }}
            key: {{ $.root.Values.hfToken.key }}
      {{- end }}
      {{- if $.root.Values.otlp.endpoint }}
      - name: OTLP_ENDPOINT
        value: {{ $.root.Values.otlp.endpoint | quote }}
      - name: OTLP_SERVICE_NAME
        value: {{ $.root.Values.otlp.serviceName | quote }}
      {{- end }}
      {{- with $.root.Values.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- if $.multiNode }}
      - name: NUM_SHARD
        value: {{ $.root.Values.multiNode.numShard | quote }}
      - name: MASTER_PORT
        value: {{ $.root.Values.multiNode.masterPort | quote }}
      - name: TGI_DIST_SECRET  # the group's shared secret: every join and message carries its HMAC
        valueFrom:
          secretKeyRef:
            name: {{ $.root.Values.multiNode.secretName | quote }}
            key: {{ $.root.Values.multiNode.secretKey | quote }}
      {{- end }}
      {{- if $.headless }}
      - name: HEADLESS
        value: "true"
      {{- end }}
    {{- if not $.headless }}
    ports:
      - name: http
        containerPort: {{ $.root.Values.port }}
        protocol: TCP
      {{- if $.multiNode }}
      - name: rendezvous
        containerPort: {{ $.root.Values.multiNode.masterPort }}
        protocol: TCP
      {{- end }}
    startupProbe:
      httpGet:
        path: /health
        port: http
      periodSeconds: {{ $.root.Values.probes.periodSeconds }}
      failureThreshold: {{ div $.root.Values.probes.startupSeconds $.root.Values.probes.periodSeconds }}
    readinessProbe:
      httpGet:
        path: /health
        port: http
      periodSeconds: {{ $.root.Values.probes.periodSeconds }}
    livenessProbe:
      httpGet:
        path: /health
        port: http
      periodSeconds: {{ $.root.Values.probes.periodSeconds }}
      failureThreshold: 6
    {{- end }}
    resources:
      {{- $resources := deepCopy $.root.Values.resources }}
      {{- if ne $.root.Values.hardware "cpu" }}
      {{- $name := index $.root.Values.accelerators.resourceNames $.root.Values.hardware }}
      {{- $count := $.root.Values.accelerators.count }}
      {{- if $.multiNode }}{{- $count = div (int $.root.Values.multiNode.numShard) (int $.root.Values.multiNode.nodes) }}{{- end }}
      {{- $_ := set $resources "limits" (merge (dict $name $count) (default dict $resources.limits)) }}
      {{- $_ := set $resources "requests" (merge (dict $name $count) (default dict $resources.requests)) }}
      {{- end }}
      {{- toYaml $resources | nindent 6 }}
    volumeMounts:
      - name: data
        mountPath: /data
      - name: shm
        mountPath: /dev/shm
      - name: tmp
        mountPath: /tmp
volumes:
  - name: data
    {{- if $.root.Values.cache.existingClaim }}
    persistentVolumeClaim:
      claimName: {{ $.root.Values.cache.existingClaim }}
    {{- else }}
    emptyDir:
      sizeLimit: {{ $.root.Values.cache.sizeLimit }}
    {{- end }}
  - name: shm
    emptyDir:
      medium: Memory
      sizeLimit: {{ $.root.Values.shmSize }}
  - name: tmp
    emptyDir:
      sizeLimit: {{ $.root.Values.tmpSizeLimit }}
{{- with $.root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
