module github.com/gpualloc/gpualloc

go 1.25

require (
	github.com/spf13/pflag v1.0.10
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
