# Delivery analytics (pipeline/): included by the main Makefile, which defines
# VENV, PY and the `venv` target (installs requirements-pipeline.txt too).

EVENTS ?= out/demo/events.jsonl
REPORT_DIR ?= out/report
TARGET_SHARE ?= 0.99
# make compact: the JSON exports under EVENTS, compacted once per file into
# Parquet partitioned by date; `make report COMPACTED_ONLY=1` reads it
# (SINCE=YYYY-MM-DD UNTIL=YYYY-MM-DD to report on some days only).
COMPACTED ?= out/compacted
SINCE ?=
UNTIL ?=
# Local Spark: the driver is the only executor; 2 cores here. Defaults in
# pipeline/session.py (LOCAL); these override them.
SPARK_MASTER ?= local[*]
# empty: pipeline/session.py's LOCAL.driver_memory (3g)
SPARK_DRIVER_MEMORY ?=
# empty: pipeline/session.py's LOCAL.shuffle_partitions (4 per core)
SHUFFLE_PARTITIONS ?=
PIPELINE_ARGS ?=

# make bench-pipeline BENCH_SIZES= BENCH_ROOMS=2000 for a quick run (no sizes, a day of
# 2,000 rooms x 40 messages; the day needs more than 250,000 events: 1,150 rooms or more);
# BENCH_ARGS=--no-day for the sizes only
BENCH_SIZES ?= 1000000,10000000,30000000
BENCH_ROOMS ?= 25000
BENCH_DIR ?= out/bench
BENCH_ARGS ?=

# make report-cloud: Dataproc Serverless. Runtime 3.0 = Spark 4.0 (pyspark pin).
GCP_PROJECT ?= $(shell gcloud config get-value project 2>/dev/null)
GCP_REGION ?= europe-west1
DATAPROC_RUNTIME ?= 3.0
# The bucket the Logging sink writes to, and the log's folder in it
# (Cloud Functions 2nd gen: stdout of the Cloud Run service).
LOG_BUCKET ?=
LOG_ID ?= run.googleapis.com/stdout
# A directory, read recursively: the whole export, or narrow it to one day,
# e.g. CLOUD_EVENTS=gs://BUCKET/run.googleapis.com/stdout/2026/11/22/
CLOUD_EVENTS ?= gs://$(LOG_BUCKET)/$(LOG_ID)/
# Where the job writes tables and the report, and where gcloud stages the code.
REPORT_BUCKET ?=
CLOUD_RUN_ID ?= $(shell date -u +%Y%m%d-%H%M%S)
CLOUD_RUN_ID := $(CLOUD_RUN_ID)
CLOUD_REPORT_DIR ?= gs://$(REPORT_BUCKET)/reports/$(CLOUD_RUN_ID)
# The compacted store the cloud job keeps up to date (its first stage) and reads.
CLOUD_COMPACTED ?= gs://$(REPORT_BUCKET)/compacted
DATAPROC_SA ?=
DATAPROC_SUBNET ?=
PIPELINE_ZIP := out/pipeline-src.zip

.PHONY: report report-cloud bench-pipeline test-pipeline pipeline-zip compact spark-cds

# The JVM class archive local Spark runs start from (pipeline/session.py,
# LocalSettings.class_archive): recorded once per virtualenv, about 40 s.
SPARK_CDS := $(VENV)/spark-classes.jsa
spark-cds: $(SPARK_CDS)
$(SPARK_CDS): $(VENV)/.installed
	$(PY) -m tools.bench.spark_class_archive --out $@

DAYS_ARGS = $(if $(SINCE),--since $(SINCE)) $(if $(UNTIL),--until $(UNTIL))
MEMORY_ARGS = $(if $(SPARK_DRIVER_MEMORY),--driver-memory $(SPARK_DRIVER_MEMORY))
LOCAL_ARGS = --master '$(SPARK_MASTER)' $(MEMORY_ARGS) \
	$(if $(SHUFFLE_PARTITIONS),--shuffle-partitions $(SHUFFLE_PARTITIONS))

# `make report` reads the JSON at EVENTS (compacting it afresh into
# REPORT_DIR/events); `make report COMPACTED_ONLY=1` reads the store `make compact` keeps.
report: venv $(SPARK_CDS)
ifdef COMPACTED_ONLY
	$(PY) -m pipeline.job --compacted $(COMPACTED) --output $(REPORT_DIR) --target-share $(TARGET_SHARE) $(DAYS_ARGS) \
		$(LOCAL_ARGS) $(PIPELINE_ARGS)
else
	@test -e "$(EVENTS)" || { echo "no event log at $(EVENTS): run 'make demo' first, or pass EVENTS=path-or-glob"; exit 2; }
	$(PY) -m pipeline.job --input $(EVENTS) --output $(REPORT_DIR) --target-share $(TARGET_SHARE) $(DAYS_ARGS) \
		$(LOCAL_ARGS) $(PIPELINE_ARGS)
endif
	@echo "report: $(REPORT_DIR)/report.html (tables: $(REPORT_DIR)/*/ as Parquet, key chart: $(REPORT_DIR)/timeout_tradeoff.png)"

compact: venv $(SPARK_CDS)
	@test -e "$(EVENTS)" || { echo "no event log at $(EVENTS): pass EVENTS=file, directory or glob of JSON exports"; exit 2; }
	$(PY) -m pipeline.compact --input $(EVENTS) --store $(COMPACTED) \
		--master '$(SPARK_MASTER)' $(MEMORY_ARGS)

# The job's code as one zip for --py-files: pipeline/ and the schema module it imports.
pipeline-zip: venv
	@mkdir -p $(dir $(PIPELINE_ZIP))
	$(PY) -c "import zipfile, pathlib; z = zipfile.ZipFile('$(PIPELINE_ZIP)', 'w', zipfile.ZIP_DEFLATED); \
		[z.write(p) for p in sorted(pathlib.Path('pipeline').glob('*.py'))]; \
		[z.write(p) for p in ('shared/__init__.py', 'shared/events.py')]; z.close()"

report-cloud: pipeline-zip
	@test -n "$(GCP_PROJECT)" || { echo "set GCP_PROJECT"; exit 2; }
	@test -n "$(LOG_BUCKET)" || { echo "set LOG_BUCKET (the Logging sink's bucket)"; exit 2; }
	@test -n "$(REPORT_BUCKET)" || { echo "set REPORT_BUCKET (output and staging bucket)"; exit 2; }
	gcloud dataproc batches submit pyspark pipeline/job.py \
		--project=$(GCP_PROJECT) --region=$(GCP_REGION) \
		--version=$(DATAPROC_RUNTIME) \
		--batch=baton-analytics-$(CLOUD_RUN_ID) \
		--py-files=$(PIPELINE_ZIP) \
		--deps-bucket=gs://$(REPORT_BUCKET) \
		$(if $(DATAPROC_SA),--service-account=$(DATAPROC_SA)) \
		$(if $(DATAPROC_SUBNET),--subnet=$(DATAPROC_SUBNET)) \
		--labels=app=baton,component=analytics \
		-- --input $(CLOUD_EVENTS) --compact-to $(CLOUD_COMPACTED) --output $(CLOUD_REPORT_DIR) \
		--target-share $(TARGET_SHARE) $(DAYS_ARGS) --master cluster $(PIPELINE_ARGS)
	@echo "report: $(CLOUD_REPORT_DIR)/report.html (gcloud storage cp it to open it)"

bench-pipeline: venv $(SPARK_CDS)
	$(PY) -m tools.bench.pipeline --sizes '$(BENCH_SIZES)' --rooms $(BENCH_ROOMS) --dir $(BENCH_DIR) $(BENCH_ARGS)

test-pipeline: venv
	$(PY) -m pytest tests/pipeline -q
