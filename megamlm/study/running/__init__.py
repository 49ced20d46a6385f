"""Running a plan: ``commands`` gives each run's pretraining, export and evaluation commands; ``local`` executes
them here in dependency order; ``slurm`` writes them as chained sbatch scripts and the ``submit.sh`` that queues
them, after ``job_inputs`` checked the jobs' time limits and inputs."""
