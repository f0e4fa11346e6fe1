"""Jobs the resident worker reconstructs from their code origin in the launcher's tests."""

import os
import time

import dagster as dg


@dg.op
def report_pid(context: dg.OpExecutionContext) -> None:
    context.add_output_metadata({"pid": os.getpid()})


@dg.job(executor_def=dg.in_process_executor)  # as the product's jobs run
def which_process() -> None:
    report_pid()


@dg.op
def sleep_a_minute() -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)


@dg.job(executor_def=dg.in_process_executor)  # as the product's jobs run
def slow() -> None:
    sleep_a_minute()


@dg.op
def exit_the_process() -> None:
    os._exit(3)


@dg.job(executor_def=dg.in_process_executor)  # as the product's jobs run
def crashing() -> None:
    exit_the_process()


@dg.op
def stop_the_spark_context() -> None:
    """What a JVM that died would leave: a SparkContext that is stopped under Python."""
    from p2panda_assets.pipeline.spark.session import build_session

    build_session().sparkContext._jsc.sc().stop()


@dg.job(executor_def=dg.in_process_executor)  # as the product's jobs run
def breaks_spark() -> None:
    stop_the_spark_context()
