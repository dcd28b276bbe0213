{{- define "palisade.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "palisade.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "palisade.selectorLabels" -}}
app.kubernetes.io/name: {{ include "palisade.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "palisade.labels" -}}
{{ include "palisade.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "palisade.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "palisade.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "palisade.tlsSecret" -}}
{{- if .Values.tls.certManager.enabled -}}
{{- printf "%s-tls" (include "palisade.fullname" .) -}}
{{- else -}}
{{- required "tls.secretName is required when tls.enabled and not tls.certManager.enabled" .Values.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* The pod template shared by the StatefulSet (embedded) and the Deployment (postgres). */}}
{{- define "palisade.podTemplate" -}}
metadata:
  labels:
    {{- include "palisade.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A changed config restarts the pods; bundle changes are hot-swapped instead.
    checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
    {{- if .Values.metrics.annotations }}
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ .Values.palisade.adminPort | quote }}
    prometheus.io/path: /metrics
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "palisade.serviceAccountName" . }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ add .Values.palisade.drainTimeoutSeconds .Values.palisade.terminationSlackSeconds }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    fsGroup: 10001
    seccompProfile:
      type: RuntimeDefault
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  # The native sidecar form (Kubernetes ≥ 1.29): an init container that keeps running
  # (restartPolicy Always) starts before the SoR and stops after it.
  initContainers:
    - name: palisade
      image: "{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      restartPolicy: Always
      args: ["run", "--config", "/etc/palisade/config/palisade.toml"]
      {{- if eq .Values.store.kind "postgres" }}
      env:
        - name: PALISADE_STORE_URL
          valueFrom:
            secretKeyRef:
              name: {{ required "store.postgres.urlSecret.name is required for store.kind postgres" .Values.store.postgres.urlSecret.name }}
              key: {{ .Values.store.postgres.urlSecret.key }}
      {{- end }}
      ports:
        - { name: http, containerPort: {{ .Values.palisade.port }}, protocol: TCP }
        - { name: admin, containerPort: {{ .Values.palisade.adminPort }}, protocol: TCP }
      startupProbe:
        httpGet: { path: /healthz, port: admin{{ if .Values.admin.mtls.enabled }}, scheme: HTTPS{{ end }} }
        periodSeconds: 1
        failureThreshold: 30
      readinessProbe:
        httpGet: { path: /readyz, port: admin{{ if .Values.admin.mtls.enabled }}, scheme: HTTPS{{ end }} }
        periodSeconds: 2
        failureThreshold: 1
      livenessProbe:
        httpGet: { path: /healthz, port: admin{{ if .Values.admin.mtls.enabled }}, scheme: HTTPS{{ end }} }
        periodSeconds: 10
        failureThreshold: 3
      resources:
        {{- toYaml .Values.palisade.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        privileged: false
        capabilities:
          drop: ["ALL"]
      volumeMounts:
        - { name: config, mountPath: /etc/palisade/config, readOnly: true }
        - { name: signing, mountPath: /etc/palisade/signing, readOnly: true }
        - { name: trust, mountPath: /etc/palisade/trust, readOnly: true }
        {{- if .Values.admin.tokenSecret }}
        - { name: admin-token, mountPath: /etc/palisade/admin, readOnly: true }
        {{- end }}
        {{- if .Values.admin.mtls.enabled }}
        - { name: admin-tls, mountPath: /etc/palisade/admin-tls, readOnly: true }
        {{- end }}
        {{- if .Values.bundle.configMap }}
        - { name: bundle, mountPath: /etc/palisade/bundle, readOnly: true }
        {{- end }}
        {{- if .Values.tls.enabled }}
        - { name: tls, mountPath: /etc/palisade/tls, readOnly: true }
        {{- end }}
        - { name: state, mountPath: /var/lib/palisade }
  containers:
    - name: sor
      image: {{ .Values.sor.image }}
      imagePullPolicy: {{ .Values.sor.imagePullPolicy }}
      args:
        {{- toYaml .Values.sor.args | nindent 8 }}
      {{- with .Values.sor.env }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      resources:
        {{- toYaml .Values.sor.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        capabilities:
          drop: ["ALL"]
  volumes:
    - name: config
      configMap:
        name: {{ include "palisade.fullname" . }}-config
    - name: signing
      secret:
        secretName: {{ .Values.signing.secretName }}
        defaultMode: 0440
    - name: trust
      secret:
        secretName: {{ .Values.trust.secretName }}
    {{- if .Values.admin.tokenSecret }}
    - name: admin-token
      secret:
        secretName: {{ .Values.admin.tokenSecret }}
        defaultMode: 0440
    {{- else if not .Values.admin.mtls.enabled }}
    {{- fail "admin.tokenSecret or admin.mtls is required: the admin listener binds the pod IP" }}
    {{- end }}
    {{- if .Values.admin.mtls.enabled }}
    - name: admin-tls
      secret:
        secretName: {{ required "admin.mtls.secretName is required with admin.mtls.enabled" .Values.admin.mtls.secretName }}
        defaultMode: 0440
    {{- end }}
    {{- if .Values.bundle.configMap }}
    - name: bundle
      configMap:
        name: {{ .Values.bundle.configMap }}
        items:
          - { key: lock.json, path: lock.json }
          {{- range .Values.bundle.contracts }}
          - { key: {{ . | quote }}, path: {{ printf "contracts/%s" . | quote }} }
          {{- end }}
    {{- end }}
    {{- if .Values.tls.enabled }}
    - name: tls
      secret:
        secretName: {{ include "palisade.tlsSecret" . }}
    {{- end }}
    {{- if ne .Values.store.kind "embedded" }}
    # Quarantined lockfiles and nothing that must survive the pod: the store is the database.
    - name: state
      emptyDir: { sizeLimit: 64Mi }
    {{- end }}
{{- end -}}
