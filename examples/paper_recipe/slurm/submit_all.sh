#!/bin/bash
# The paper's comparison at 610m, chained: three pretraining runs on the same sample sequence, CPT with
# MLM from the CLM run, then export and evaluation once all have finished.
#   DATA=/data/fineweb_edu_text_document TOKENIZER=/models/llama3/tokenizer.json ROOT=/ckpt/paper \
#   HF_DATASETS=/data/hf_datasets CPT_ITERS=22000 bash submit_all.sh
set -eu
: "${DATA:?}" "${TOKENIZER:?}" "${ROOT:?}" "${HF_DATASETS:?}" "${CPT_ITERS:?set CPT_ITERS (MLM steps of the CPT run)}"
cd "$(dirname "$0")"
common="ALL,DATA=$DATA,TOKENIZER=$TOKENIZER,ROOT=$ROOT"
mlm=$(sbatch --parsable --export="$common,OBJECTIVE=mlm" pretrain.sbatch)
clm=$(sbatch --parsable --export="$common,OBJECTIVE=clm" pretrain.sbatch)
both=$(sbatch --parsable --export="$common,OBJECTIVE=clm_then_mlm" pretrain.sbatch)
cpt=$(sbatch --parsable --dependency=afterok:$clm --export="$common,INIT=$ROOT/clm,NAME=clm_cpt_mlm,CPT_ITERS=$CPT_ITERS" cpt.sbatch)
sbatch --dependency=afterok:$mlm:$clm:$both:$cpt \
    --export="ALL,ROOT=$ROOT,HF_DATASETS=$HF_DATASETS,MODELS=mlm clm clm_then_mlm clm_cpt_mlm" evaluate.sbatch
