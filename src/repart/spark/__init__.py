"""The job side: what a Spark batch does with repart (DESIGN §9). The only package that imports pyspark.

- ``observe`` emits a snapshot of a batch's key frequencies for the controller;
- ``route`` / ``partition`` place rows on channels with JVM-native expressions;
- ``StateStore`` keeps keyed state in Parquet per channel and applies migration plans atomically.
"""
